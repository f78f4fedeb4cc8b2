"""Synthetic task version 2: learnable, but not at once, and never to 100 %."""

from __future__ import annotations

import statistics

import pytest
import torch
from torch import nn

from wattlab.train import data
from wattlab.train.config import make_run_config
from wattlab.train.data import load_dataset, synthetic_dataset
from wattlab.train.distributed import DistContext
from wattlab.train.loop import run_training
from wattlab.train.synthetic_tasks import LOOK_ALIKE, V2

CHANCE = 0.1


def _small_cnn() -> nn.Module:
    def block(cin: int, cout: int, stride: int = 1) -> list[nn.Module]:
        conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        return [conv, nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, 16, 2),
        *block(16, 32, 2),
        *block(32, 32),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def _accuracy(version: int, epochs: int, seed: int) -> float:
    cfg = make_run_config(
        device="cpu",
        synthetic_version=version,
        train_samples=4096,
        test_samples=1024,
        epochs=epochs,
        batch_size=64,
        seed=seed,
        warmup_steps=0,
        epoch_eval_samples=0,
    )
    torch.manual_seed(seed)
    return run_training(cfg, DistContext(), model=_small_cnn(), dataset=load_dataset(cfg)).accuracy


@pytest.mark.slow
def test_v2_is_learnable_but_not_at_once_and_more_epochs_do_better():
    # measured on 2 CPU cores (2026-12-04): 3 epochs 0.107 / 0.117, 12 epochs 0.350 / 0.326;
    # the old task reaches 0.99 in 12 epochs with this model
    short = [_accuracy(2, 3, seed) for seed in (0, 1)]
    long = [_accuracy(2, 12, seed) for seed in (0, 1)]
    easy = _accuracy(1, 3, 0)  # the same model on the old task, the short budget
    assert statistics.mean(long) > CHANCE + 0.08, long  # learnt: clearly above chance
    assert statistics.mean(long) > statistics.mean(short) + 0.05, (short, long)
    assert max(long) < 0.9, long  # not solved by a small model in a short budget
    assert easy > max(short) + 0.3, (easy, short)  # v1 was learnt at once; v2 is not


@pytest.mark.slow
def test_v2_is_deterministic_a_prefix_and_differs_from_v1():
    data.clear_memory_cache()
    a = synthetic_dataset(2100, 300, version=2)
    data.clear_memory_cache()
    b = synthetic_dataset(100, 10, version=2)
    assert torch.equal(a.train_x[:100], b.train_x) and torch.equal(a.test_y[:10], b.test_y)
    one = synthetic_dataset(100, 10, version=1)
    assert not torch.equal(one.train_x, b.train_x)
    counts = torch.bincount(a.train_y, minlength=10)
    assert counts.min() > 150  # every class


def test_v2_parameters_make_it_harder_than_v1():
    assert V2.confusion > 0 and V2.label_noise > 0
    assert min(V2.contrast) < 0.1 and V2.noise_std > 0.06
    # look-alikes pair up: each class is its partner's partner, never itself
    assert all(LOOK_ALIKE[LOOK_ALIKE[k]] == k and LOOK_ALIKE[k] != k for k in range(10))


def test_label_noise_touches_the_training_split_only():
    templates = data._templates(V2.sizes)
    x_train, y_train = data._synthetic_chunk(templates, 2048, 123, V2, train=True)
    x_test, y_test = data._synthetic_chunk(templates, 2048, 123, V2, train=False)
    assert torch.equal(x_train, x_test)  # same draws, same images
    changed = float((y_train != y_test).float().mean())
    # 5 % replaced by a uniform class, a tenth of which land on the same class
    assert 0.02 < changed < 0.08, changed
