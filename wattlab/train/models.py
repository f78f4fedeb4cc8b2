"""The models: torchvision architectures, randomly initialised (never downloads weights).

``stem="cifar"`` adapts the ResNets to 32x32 images the usual way: the 7x7 stride-2 first
convolution becomes 3x3 stride 1 and the max-pool is removed, so the first stage sees 32x32
maps instead of 8x8 (16x more compute, much better accuracy). ``stem="imagenet"`` keeps
torchvision's stem. The other models (MobileNet, VGG, EfficientNet) ignore ``stem`` and keep
their own first layers.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from wattlab.errors import ConfigError
from wattlab.train.config import MODELS, STEMS

MODEL_NAMES = MODELS  # one list of models: the run configuration's
_RESNETS = ("resnet18", "resnet34", "resnet50")


def build_model(name: str, *, stem: str = "cifar", num_classes: int = 10) -> nn.Module:
    """A freshly initialised torchvision ``name`` with ``num_classes`` outputs (weights=None).

    Initialisation draws from torch's global generator: seed it first for identical weights.
    """
    import torchvision.models as tvm  # imported here: no work at import of wattlab

    if name not in MODEL_NAMES:
        raise ConfigError(f"unknown model {name!r}; allowed: {', '.join(MODEL_NAMES)}.")
    if stem not in STEMS:
        raise ConfigError(f"unknown stem {stem!r}; allowed: {', '.join(STEMS)}.")
    if num_classes < 2:
        raise ConfigError(f"num_classes must be at least 2, got {num_classes}.")
    model = getattr(tvm, name)(weights=None, num_classes=num_classes)
    if name in _RESNETS and stem == "cifar":
        model.conv1 = nn.Conv2d(3, model.conv1.out_channels, 3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = nn.Identity()
    # Trick: BatchNorm running statistics follow the weights at momentum 0.1 (PyTorch's
    # default). torchvision's MobileNets and EfficientNet use 0.01, tuned for 600-epoch
    # ImageNet schedules; after a short fixed budget their evaluation statistics would lag the
    # weights by hundreds of steps and score near chance although training converged.
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = 0.1
    return model


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (trainable or not), each shared tensor once."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def forward_flops_per_sample(model: nn.Module, image_size: int = 32) -> float:
    """Forward FLOPs for one ``3 x image_size x image_size`` image (a multiply-add counts 2).

    Counted with ``torch.utils.flop_counter.FlopCounterMode`` on a batch of 2 on the CPU in
    eval mode (matmuls and convolutions; elementwise ops are not counted), divided by 2. The
    model is copied to the CPU when it lives elsewhere; its mode is restored afterwards.
    A training step costs about 3x this (forward + backward).
    """
    from torch.utils.flop_counter import FlopCounterMode

    model = getattr(model, "_orig_mod", model)  # torch.compile wrapper -> the module
    model = getattr(model, "module", model)  # DistributedDataParallel -> the module
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    probe = model if on_cpu else copy.deepcopy(model).cpu()
    was_training = probe.training
    probe.eval()
    try:
        x = torch.zeros(2, 3, image_size, image_size)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            probe(x)
    finally:
        probe.train(was_training)
    return counter.get_total_flops() / 2
