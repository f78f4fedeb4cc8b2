"""Models: every name builds, the CIFAR stem, parameter and FLOP counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from wattlab.errors import ConfigError
from wattlab.train.config import MODELS
from wattlab.train.models import (
    MODEL_NAMES,
    build_model,
    count_parameters,
    forward_flops_per_sample,
)


def test_model_names_match_the_config():
    assert tuple(MODEL_NAMES) == tuple(MODELS)


# the largest models take seconds each on a CPU: they run with the slow tests
HEAVY_MODELS = {"resnet50", "vgg16", "efficientnet_b0"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY_MODELS else n for n in MODEL_NAMES],
)
def test_every_model_gives_ten_logits_on_cifar_images(name):
    torch.manual_seed(0)
    model = build_model(name, stem="cifar").eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    assert count_parameters(model) > 100_000


def test_cifar_stem_replaces_the_resnet_stem_only():
    cifar = build_model("resnet50", stem="cifar")
    imagenet = build_model("resnet50", stem="imagenet")
    assert cifar.conv1.kernel_size == (3, 3) and cifar.conv1.stride == (1, 1)
    assert isinstance(cifar.maxpool, nn.Identity)
    assert imagenet.conv1.kernel_size == (7, 7) and imagenet.conv1.stride == (2, 2)
    assert isinstance(imagenet.maxpool, nn.MaxPool2d)
    # other models ignore the stem: same architecture either way
    a = build_model("mobilenet_v3_small", stem="cifar")
    b = build_model("mobilenet_v3_small", stem="imagenet")
    assert [p.shape for p in a.parameters()] == [p.shape for p in b.parameters()]


def test_build_is_seeded_and_num_classes_is_honoured():
    torch.manual_seed(1)
    a = build_model("resnet18", num_classes=7)
    torch.manual_seed(1)
    b = build_model("resnet18", num_classes=7)
    assert a.fc.out_features == 7
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_unknown_names_are_config_errors_that_say_how_to_list_the_choices():
    with pytest.raises(ConfigError) as info:
        build_model("resnet1000")
    message = str(info.value)
    assert "resnet1000" in message and "list_models" in message and "--model-factory" in message
    assert "did you mean resnet101" in message  # the closest torchvision names
    with pytest.raises(ConfigError, match="cifar, imagenet"):
        build_model("resnet18", stem="tiny")


def test_parameter_count_counts_shared_tensors_once():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert count_parameters(model) == 4 * 4 + 4
    resnet18 = build_model("resnet18", stem="cifar")
    # torchvision resnet18 (11 689 512 params, 1000 classes) with a 3x3 stem and 10 classes
    expected = 11_689_512 - (64 * 3 * 7 * 7 - 64 * 3 * 3 * 3) - (512 * 990 + 990)
    assert count_parameters(resnet18) == expected


@pytest.mark.slow
def test_forward_flops_per_sample():
    linear = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
    assert forward_flops_per_sample(linear) == 2 * 3072 * 10
    model = build_model("resnet18", stem="cifar")
    model.train()
    flops = forward_flops_per_sample(model)
    assert 1.0e9 < flops < 1.2e9  # the well-known ~0.56 GMACs of resnet18 on 32x32 images
    assert model.training  # mode restored
    imagenet = forward_flops_per_sample(build_model("resnet18", stem="imagenet"))
    assert imagenet < flops / 8  # the stride-4 stem works on 16x fewer pixels
    assert forward_flops_per_sample(linear, image_size=32) == forward_flops_per_sample(linear)
