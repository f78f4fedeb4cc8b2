"""Datasets and the input pipeline: synthetic data, the CIFAR-10 reader, sharding, augmentation."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch import nn

from wattlab.errors import ConfigError, DataError
from wattlab.train import data
from wattlab.train.config import make_run_config
from wattlab.train.data import (
    CROP_PAD,
    DeviceData,
    channel_stats,
    load_dataset,
    plan_epoch,
    synthetic_dataset,
)
from wattlab.train.distributed import DistContext
from wattlab.train.loop import run_training

# --------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_synthetic_is_deterministic_and_prefix_stable():
    data.clear_memory_cache()
    a = synthetic_dataset(3000, 500)
    data.clear_memory_cache()
    b = synthetic_dataset(3000, 500)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
    assert torch.equal(a.test_x, b.test_x) and torch.equal(a.test_y, b.test_y)
    # train_samples=N is the first N of a larger draw, generated or cached
    data.clear_memory_cache()
    small = synthetic_dataset(100, 10)
    assert torch.equal(small.train_x, a.train_x[:100])
    assert torch.equal(small.test_y, a.test_y[:10])
    # another generator seed gives other data; train and test are different streams
    other = synthetic_dataset(100, 10, seed=1)
    assert not torch.equal(other.train_x, small.train_x)
    assert not torch.equal(a.train_x[:500], a.test_x)


@pytest.mark.slow
def test_synthetic_full_size_shapes_and_classes():
    ds = synthetic_dataset()
    assert ds.name == "synthetic" and ds.num_classes == 10
    assert ds.train_x.shape == (50_000, 3, 32, 32) and ds.test_x.shape == (10_000, 3, 32, 32)
    assert ds.train_x.dtype == torch.uint8 and ds.train_y.dtype == torch.int64
    counts = torch.bincount(ds.train_y, minlength=10)
    assert counts.min() > 4500 and counts.max() < 5500  # every class, roughly balanced
    assert int(ds.train_x.float().std()) > 20  # real images, not constant


@pytest.mark.slow
def test_synthetic_disk_cache_round_trip(tmp_path):
    first = synthetic_dataset(50, 20, seed=7, cache_dir=tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(f.endswith(".pt") for f in files)
    data.clear_memory_cache()
    again = synthetic_dataset(50, 20, seed=7, cache_dir=tmp_path)
    assert torch.equal(first.train_x, again.train_x)
    assert torch.equal(first.test_y, again.test_y)


def _tiny_cnn() -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
        )

    return nn.Sequential(
        block(3, 16),
        nn.MaxPool2d(2),
        block(16, 32),
        nn.MaxPool2d(2),
        block(32, 64),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def _linear_probe_accuracy(ds: data.Dataset) -> float:
    """Multinomial logistic regression on standardised raw pixels (full-batch L-BFGS)."""
    x = ds.train_x.flatten(1).float()
    mean, std = x.mean(0), x.std(0) + 1e-3
    x = (x - mean) / std
    xt = (ds.test_x.flatten(1).float() - mean) / std
    torch.manual_seed(0)
    probe = nn.Linear(x.shape[1], 10)
    opt = torch.optim.LBFGS(probe.parameters(), lr=0.5, max_iter=100, history_size=10)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(probe(x), ds.train_y)
        loss = loss + 1e-3 * probe.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float((probe(xt).argmax(1) == ds.test_y).float().mean())


@pytest.mark.slow
def test_synthetic_v1_is_learnable_by_a_cnn_but_not_by_a_linear_model():
    cfg = make_run_config(
        device="cpu",
        synthetic_version=1,
        recipe=1,
        train_samples=3072,
        test_samples=1000,
        epochs=2,
        batch_size=64,
        lr=0.05,
        warmup_steps=0,
    )
    ds = load_dataset(cfg)
    torch.manual_seed(0)
    cnn = run_training(cfg, DistContext(), model=_tiny_cnn(), dataset=ds)
    linear = _linear_probe_accuracy(ds)
    assert cnn.accuracy > 0.6, cnn
    assert linear < 0.3, linear  # chance is 0.1
    assert cnn.accuracy - linear > 0.35


# --------------------------------------------------------------------------------------------
# CIFAR-10 reader
# --------------------------------------------------------------------------------------------


def _write_batch(path, x: np.ndarray, labels: list[int]) -> None:
    with path.open("wb") as f:
        pickle.dump({b"batch_label": b"x", b"data": x, b"labels": labels, b"filenames": []}, f)


def _fake_cifar(root, per_batch: int = 4, test: int = 3):
    """The official layout with tiny batches; image k of the train set has all pixels k."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    k = 0
    for i in range(1, 6):
        x = np.stack([np.full(3072, k + j, dtype=np.uint8) for j in range(per_batch)])
        _write_batch(folder / f"data_batch_{i}", x, [(k + j) % 10 for j in range(per_batch)])
        k += per_batch
    x = np.zeros((test, 3072), dtype=np.uint8)
    x[:, :1024] = 200  # red plane first, then green, then blue
    _write_batch(folder / "test_batch", x, [9] * test)
    return folder


def test_cifar10_reader_official_layout(tmp_path):
    folder = _fake_cifar(tmp_path)
    for where in (tmp_path, folder):  # DIR or DIR/cifar-10-batches-py
        ds = load_dataset("cifar10", data_dir=where)
        assert ds.name == "cifar10"
        assert ds.train_x.shape == (20, 3, 32, 32) and ds.test_x.shape == (3, 3, 32, 32)
        assert ds.train_x[13].unique().tolist() == [13]
        assert ds.train_y.tolist() == [k % 10 for k in range(20)]
        assert ds.test_x[:, 0].unique().tolist() == [200]  # channel order R, G, B
        assert ds.test_x[:, 1:].unique().tolist() == [0]
    cfg = make_run_config(
        dataset="cifar10", data_dir=str(tmp_path), train_samples=6, test_samples=2, epochs=1
    )
    ds = load_dataset(cfg)  # first N, across batch files
    assert ds.train_x.shape[0] == 6 and ds.train_x[5].unique().tolist() == [5]
    assert ds.test_y.tolist() == [9, 9]


@pytest.mark.parametrize(
    "damage, words",
    [
        ("missing_dir", "does not exist"),
        ("missing_file", "missing"),
        ("garbage", "could not be read"),
        ("not_a_dict", "malformed"),
        ("wrong_width", "expected"),
        ("float_data", "expected"),
        ("bad_label", "expected"),
        ("label_count", "expected"),
    ],
)
def test_cifar10_reader_rejects_bad_input(tmp_path, damage, words):
    folder = _fake_cifar(tmp_path)
    target = folder / "data_batch_3"
    where = tmp_path
    if damage == "missing_dir":
        where = tmp_path / "nowhere"
    elif damage == "missing_file":
        target.unlink()
    elif damage == "garbage":
        target.write_bytes(b"this is not a pickle")
    elif damage == "not_a_dict":
        target.write_bytes(pickle.dumps([1, 2, 3]))
    elif damage == "wrong_width":
        _write_batch(target, np.zeros((4, 100), dtype=np.uint8), [0] * 4)
    elif damage == "float_data":
        _write_batch(target, np.zeros((4, 3072), dtype=np.float32), [0] * 4)
    elif damage == "bad_label":
        _write_batch(target, np.zeros((4, 3072), dtype=np.uint8), [0, 1, 2, 10])
    elif damage == "label_count":
        _write_batch(target, np.zeros((4, 3072), dtype=np.uint8), [0, 1])
    with pytest.raises(DataError) as info:
        load_dataset("cifar10", data_dir=where)
    message = str(info.value)
    assert words in message
    assert (str(where) if damage == "missing_dir" else str(target)) in message
    assert message.count(". ") == 0  # one sentence


def test_load_dataset_rejects_unknown_names_and_bad_counts():
    with pytest.raises(ConfigError, match="synthetic, cifar10"):
        load_dataset("imagenet")
    with pytest.raises(ConfigError, match="train_samples"):
        load_dataset("synthetic", train_samples=0)
    with pytest.raises(ConfigError, match="cifar-10-batches-py"):
        load_dataset("cifar10")


# --------------------------------------------------------------------------------------------
# Sharding and augmentation
# --------------------------------------------------------------------------------------------


def test_sharding_gives_identical_global_batches_for_any_world_size():
    n, batch = 1000, 64
    one = plan_epoch(n, batch, seed=3, epoch=2)
    for world in (2, 4):
        parts = [
            plan_epoch(n, batch, seed=3, epoch=2, world_size=world, rank=r) for r in range(world)
        ]
        assert all(p.indices.shape == (n // batch, batch // world) for p in parts)
        for field in ("indices", "flip", "shift_y", "shift_x"):
            joined = torch.cat([getattr(p, field) for p in parts], dim=1)
            assert torch.equal(joined, getattr(one, field)), field
    # one epoch visits distinct samples; the last partial batch is dropped
    assert one.indices.unique().numel() == (n // batch) * batch
    # another epoch, another order; the same (seed, epoch), the same order
    assert not torch.equal(plan_epoch(n, batch, seed=3, epoch=3).indices, one.indices)
    assert torch.equal(plan_epoch(n, batch, seed=3, epoch=2).indices, one.indices)
    # a partial final epoch takes the first steps of the same permutation
    part = plan_epoch(n, batch, seed=3, epoch=2, steps=5)
    assert torch.equal(part.indices, one.indices[:5])
    assert one.shift_x.min() >= -CROP_PAD and one.shift_x.max() <= CROP_PAD
    assert 0.3 < one.flip.float().mean() < 0.7


def test_sharding_rejects_impossible_batches():
    with pytest.raises(ConfigError, match="larger than"):
        plan_epoch(10, 64, seed=0, epoch=1)
    with pytest.raises(ConfigError, match="divide evenly"):
        plan_epoch(1000, 63, seed=0, epoch=1, world_size=2)


def test_device_batches_crop_flip_and_normalise():
    ds = synthetic_dataset(256, 64)
    dev = DeviceData(ds, torch.device("cpu"))
    plan = plan_epoch(256, 32, seed=0, epoch=1)
    # no shift and no flip: the batch is the normalised images themselves
    still = data.EpochPlan(
        plan.indices, torch.zeros_like(plan.flip), *(torch.zeros_like(plan.shift_x),) * 2
    )
    x, y = dev.train_batch(dev.prepare(still), 0)
    idx = plan.indices[0]
    raw = ds.train_x[idx].float()
    assert torch.equal(y, ds.train_y[idx])
    assert torch.allclose(x / dev.inv_std + dev.mean, raw, atol=1e-3)
    # flip everything, shift right by 2 and down by 1: compare with torch's own reflect pad
    moved = data.EpochPlan(
        plan.indices,
        torch.ones_like(plan.flip),
        torch.ones_like(plan.shift_y),
        torch.full_like(plan.shift_x, 2),
    )
    x, _ = dev.train_batch(dev.prepare(moved), 0)
    padded = nn.functional.pad(raw, (CROP_PAD,) * 4, mode="reflect")
    crop = padded[:, :, CROP_PAD + 1 : CROP_PAD + 33, CROP_PAD + 2 : CROP_PAD + 34]
    assert torch.allclose(x / dev.inv_std + dev.mean, crop.flip(-1), atol=1e-3)
    # the whole training set is normalised to mean 0, std 1 per channel
    mean, std = channel_stats(ds.train_x)
    assert torch.allclose(dev.mean.flatten().double(), mean, atol=1e-4)
    pixels = (ds.train_x.float() - dev.mean) * dev.inv_std
    assert torch.allclose(pixels.mean((0, 2, 3)), torch.zeros(3), atol=1e-3)
    assert torch.allclose(pixels.std((0, 2, 3)), torch.ones(3), atol=1e-2)
    # test batches cover the range in order, un-augmented
    batches = list(dev.test_batches(30, start=10, stop=64))
    assert [len(b[1]) for b in batches] == [30, 24]
    assert torch.equal(torch.cat([b[1] for b in batches]), ds.test_y[10:64])
    # padded: every image batch has the training shape, labels say which rows are real, and the
    # real rows are the same images as unpadded
    padded = list(dev.test_batches(30, start=10, stop=64, pad=True))
    assert [tuple(b[0].shape[:1]) for b in padded] == [(30,), (30,)]
    assert [len(b[1]) for b in padded] == [30, 24]
    assert torch.equal(padded[1][0][:24], batches[1][0])
    assert torch.equal(padded[1][0][24:], batches[1][0][-1:].expand(6, -1, -1, -1))
