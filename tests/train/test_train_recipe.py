"""Recipe 2 (per-family optimiser, batch-scaled rate, clipping) and the hashes of old configs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torchvision.models.convnext import CNBlockConfig, ConvNeXt

from wattlab.errors import ConfigError
from wattlab.train import loop
from wattlab.train.config import make_run_config
from wattlab.train.models import build_model
from wattlab.train.recipe import lr_at, model_family, resolve, zero_init_residual


def _cfg(**values):
    return make_run_config(device="cpu", epochs=1, **values)


# Hashes main computed before synthetic_version, recipe and epoch_eval_samples existed (git
# 2015eab): the same configurations asked for with the old behaviour must keep them.
OLD = {
    "c9f19bc76064b9bc": {"model": "resnet18", "epochs": 3},
    "55cc01a3b6ca40d2": {
        "model": "resnet50",
        "budget_samples": 300000,
        "precision": "amp-bf16",
        "batch_size": 512,
        "image_size": 64,
    },
    "636661c6a92f78ed": {"epochs": 2, "dataset": "cifar10", "data_dir": "/x"},
}
LEGACY = {"synthetic_version": 1, "recipe": 1, "epoch_eval_samples": 0}


def test_old_configurations_keep_their_hash_and_the_new_defaults_do_not():
    for digest, values in OLD.items():
        assert make_run_config(**values, **LEGACY).config_hash() == digest, values
    old = make_run_config(**OLD["c9f19bc76064b9bc"], **LEGACY)
    new = make_run_config(model="resnet18", epochs=3)
    assert (new.synthetic_version, new.recipe, new.epoch_eval_samples) == (2, 2, 1024)
    assert new.config_hash() != old.config_hash()
    # each new field on its own changes the hash away from the old behaviour
    for field, value in (("synthetic_version", 2), ("recipe", 2), ("epoch_eval_samples", 512)):
        one = make_run_config(**{**old.model_dump(), field: value})
        assert one.config_hash() != old.config_hash(), field
    # the synthetic task changes nothing on CIFAR-10, so it stays out of that hash
    a = make_run_config(epochs=1, dataset="cifar10", data_dir="/x", synthetic_version=1)
    b = make_run_config(epochs=1, dataset="cifar10", data_dir="/x", synthetic_version=2)
    assert a.config_hash() == b.config_hash()


@pytest.mark.parametrize(
    "values, words",
    [
        ({"synthetic_version": 3}, "synthetic_version"),
        ({"recipe": 0}, "recipe"),
        ({"epoch_eval_samples": -1}, "epoch_eval_samples"),
    ],
)
def test_bad_versions_are_one_sentence(values, words):
    with pytest.raises(ConfigError, match=words):
        _cfg(**values)


def _tiny_convnext() -> nn.Module:
    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)


def test_families_come_from_the_normalisation_layers():
    assert model_family(build_model("resnet18")) == "batchnorm"
    assert model_family(_tiny_convnext()) == "layernorm"
    assert model_family(build_model("vit_p4_d1_w64", image_size=32)) == "layernorm"
    assert model_family(build_model("vgg11")) == "unnormalised"
    assert model_family(build_model("vgg11_bn")) == "batchnorm"


def test_recipe_two_per_family_and_batch_scaled():
    cfg = _cfg(batch_size=1024)
    r = resolve(cfg, build_model("resnet18"))
    assert (r.optimizer, r.zero_init_residual, r.clip_grad_norm) == ("sgd", True, 5.0)
    assert r.peak_lr == pytest.approx(0.2 * math.sqrt(1024 / 256))
    a = resolve(cfg, _tiny_convnext())
    assert a.optimizer == "adamw" and a.weight_decay == 0.05
    assert a.peak_lr == pytest.approx(1e-3 * 2) and a.clip_grad_norm == 1.0
    v = resolve(cfg, build_model("vgg11"))
    assert (
        v.optimizer == "sgd" and v.peak_lr == pytest.approx(0.02 * 2) and not v.zero_init_residual
    )
    old = resolve(_cfg(batch_size=1024, recipe=1), build_model("resnet18"))
    assert (old.optimizer, old.peak_lr, old.clip_grad_norm) == ("sgd", 0.2, None)
    assert "adamw" in a.describe() and "recipe 2" in a.describe()


def test_recipe_one_schedule_is_the_old_schedule():
    old = resolve(_cfg(recipe=1), build_model("resnet18"))
    for total in (20, 400, 2000):
        for step in (0, 3, 49, 50, 199, total - 1):
            assert lr_at(step, total, old) == pytest.approx(loop.lr_at(step, total, 0.2))
    new = resolve(_cfg(), build_model("resnet18"))
    warm = round(0.1 * 2000)
    assert lr_at(warm - 1, 2000, new) == pytest.approx(new.peak_lr)
    assert lr_at(warm - 2, 2000, new) < new.peak_lr


def test_zero_init_residual_makes_each_block_start_as_the_identity():
    net = build_model("resnet18")
    assert zero_init_residual(net) == 8  # 4 stages x 2 basic blocks
    block = net.layer1[0]
    x = torch.randn(2, 64, 8, 8).relu()
    block.eval()
    with torch.no_grad():
        assert torch.allclose(block(x), x.relu())


@pytest.mark.slow
def test_clipping_bounds_the_update(monkeypatch):
    """With a huge loss scale, recipe 2's clipped SGD moves the weights by at most lr x clip;
    recipe 1's unclipped step moves them much further."""
    from wattlab.train.data import synthetic_dataset
    from wattlab.train.distributed import DistContext

    data = synthetic_dataset(64, 16, version=1)

    def moved(recipe: int) -> float:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
        with torch.no_grad():
            net[1].weight.mul_(1000.0)  # enormous logits: enormous gradients
        before = net[1].weight.detach().clone()
        cfg = make_run_config(
            device="cpu",
            budget_samples=64,
            batch_size=64,
            train_samples=64,
            test_samples=16,
            warmup_steps=0,
            momentum=0.0,
            weight_decay=0.0,
            recipe=recipe,
            epoch_eval_samples=0,
        )
        loop.run_training(cfg, DistContext(), dataset=data, model=net)
        return float((net[1].weight.detach() - before).norm())

    clipped = moved(2)
    recipe = resolve(_cfg(batch_size=64), nn.Linear(2, 2))  # unnormalised: clip 1
    assert clipped <= recipe.peak_lr * 1.0 * 1.0001
    assert moved(1) > 10 * clipped
