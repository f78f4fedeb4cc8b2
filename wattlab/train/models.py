"""The models: any torchvision classification constructor, or a user's factory, randomly
initialised (never downloads weights).

A model name is either a torchvision classification constructor (``resnet101``,
``densenet121``, ``convnext_tiny``, ``vit_b_16``, ...; ``torchvision_model_names()`` lists them),
built with ``weights=None`` and ``num_classes``, or a factory ``FILE.py:FUNC`` /
``package.module:FUNC`` (see ``wattlab.train.factory``).

``stem="cifar"`` adapts the ResNet family (ResNet, ResNeXt, Wide ResNet: every torchvision
``ResNet``) to 32x32 images the usual way: the 7x7 stride-2 first convolution becomes 3x3
stride 1 and the max-pool is removed, so the first stage sees 32x32 maps instead of 8x8 (16x
more compute, much better accuracy). ``stem="imagenet"`` keeps torchvision's stem. Other
models (MobileNet, VGG, EfficientNet, DenseNet, ...) and factories ignore ``stem``.

Vision transformers (``vit_*``) are built for the run's image size (torchvision's
``VisionTransformer`` takes ``image_size``); their patch size must divide it. Besides
torchvision's own sizes (``vit_b_16`` ...), ``vit_p{P}_d{D}_w{W}`` names a small ViT for small
images: patch P, D encoder layers, width W (W/64 heads of 64, an MLP of 4W), e.g.
``vit_p4_d6_w256``: 64 tokens per 32x32 image.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from wattlab.errors import ConfigError
from wattlab.train.config import MODELS, STEMS
from wattlab.train.factory import build_from_factory, is_factory

MODEL_NAMES = MODELS  # the models of the reference study (any torchvision name is accepted)
DEFAULT_IMAGE_SIZE = 32
# Constructors whose defaults do not fit a training loop: auxiliary heads return tuples in
# training mode. init_weights=True keeps torchvision's initialisation (and silences its warning).
_EXTRA_KWARGS: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}
LIST_MODELS_HINT = (
    "python -c 'import torchvision as tv; print(tv.models.list_models(module=tv.models))'"
)


@functools.cache
def torchvision_model_names() -> tuple[str, ...]:
    """Every torchvision classification constructor (``torchvision.models``' own namespace;
    detection, segmentation and video models live in sub-packages and are not listed)."""
    import torchvision.models as tvm

    return tuple(tvm.list_models(module=tvm))


# vit_p{patch}_d{depth}_w{width}: a ViT sized for small images (see the module docstring)
_SMALL_VIT = re.compile(r"vit_p(\d+)_d(\d+)_w(\d+)")


@dataclass(frozen=True)
class SmallVit:
    """The shape a ``vit_p{P}_d{D}_w{W}`` name gives."""

    patch_size: int
    depth: int
    width: int

    @property
    def heads(self) -> int:
        return self.width // 64


def small_vit(name: str) -> SmallVit | None:
    """The shape of a ``vit_p{P}_d{D}_w{W}`` name; None for other names; ConfigError when the
    numbers cannot make a ViT (width a positive multiple of 64, patch and depth >= 1)."""
    match = _SMALL_VIT.fullmatch(name)
    if match is None:
        return None
    patch, depth, width = (int(g) for g in match.groups())
    if patch < 1 or depth < 1 or width < 64 or width % 64:
        raise ConfigError(
            f"{name}: a small ViT needs patch >= 1, depth >= 1 and a width that is a multiple of "
            f"64 (heads of 64), got patch {patch}, depth {depth}, width {width}."
        )
    return SmallVit(patch, depth, width)


def check_model_name(name: str) -> None:
    """A ConfigError unless ``name`` is a torchvision classification model, a small ViT
    (``vit_p{P}_d{D}_w{W}``) or a factory ref."""
    if is_factory(name) or small_vit(name) is not None:
        return
    names = torchvision_model_names()
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(
        f"unknown model {name!r}{hint}; give a torchvision classification model (list them with "
        f"{LIST_MODELS_HINT}) or --model-factory FILE.py:FUNC."
    )


def vit_patch_size(name: str) -> int | None:
    """The patch size of a ``vit_*`` name (``vit_b_16`` -> 16, ``vit_p4_d6_w256`` -> 4), else
    None."""
    if not name.startswith("vit_"):
        return None
    shape = small_vit(name)
    if shape is not None:
        return shape.patch_size
    tail = name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _constructor_kwargs(name: str, image_size: int) -> dict[str, Any]:
    kwargs = dict(_EXTRA_KWARGS.get(name, {}))
    patch = vit_patch_size(name)
    if patch is not None:
        if image_size % patch:
            raise ConfigError(
                f"{name} cuts images into {patch}x{patch} patches, which do not tile "
                f"{image_size}x{image_size} images; give an --image-size that is a multiple "
                f"of {patch}."
            )
        kwargs["image_size"] = image_size
    return kwargs


def build_model(
    name: str,
    *,
    stem: str = "cifar",
    num_classes: int = 10,
    image_size: int = DEFAULT_IMAGE_SIZE,
) -> nn.Module:
    """A freshly initialised model ``name`` with ``num_classes`` outputs (weights=None), for
    ``3 x image_size x image_size`` images: a torchvision constructor or a factory ref.

    Initialisation draws from torch's global generator: seed it first for identical weights.
    """
    import torchvision.models as tvm  # imported here: no work at import of wattlab

    if stem not in STEMS:
        raise ConfigError(f"unknown stem {stem!r}; allowed: {', '.join(STEMS)}.")
    if num_classes < 2:
        raise ConfigError(f"num_classes must be at least 2, got {num_classes}.")
    if image_size < 1:
        raise ConfigError(f"image_size must be a positive whole number, got {image_size}.")
    if is_factory(name):
        return build_from_factory(name, num_classes=num_classes)
    check_model_name(name)
    kwargs = _constructor_kwargs(name, image_size)
    shape = small_vit(name)
    if shape is not None:
        model: nn.Module = tvm.VisionTransformer(
            patch_size=shape.patch_size,
            num_layers=shape.depth,
            num_heads=shape.heads,
            hidden_dim=shape.width,
            mlp_dim=4 * shape.width,
            num_classes=num_classes,
            **kwargs,
        )
    else:
        model = getattr(tvm, name)(weights=None, num_classes=num_classes, **kwargs)
    if isinstance(model, tvm.ResNet) and stem == "cifar":  # ResNet, ResNeXt, Wide ResNet
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


_CHECKED: set[tuple[str, str, int, int]] = set()


def check_model(
    name: str, *, stem: str = "cifar", num_classes: int = 10, image_size: int = DEFAULT_IMAGE_SIZE
) -> None:
    """Build ``name`` on the CPU and run one image through it in eval mode: a ConfigError unless
    it returns logits of shape ``(1, num_classes)``. Cached per (model, stem, size, classes),
    a factory file by its absolute path and version (``factory.source_key``)."""
    from wattlab.train.factory import source_key

    key = (source_key(name), stem, int(num_classes), int(image_size))
    if key in _CHECKED:
        return
    model = build_model(name, stem=stem, num_classes=num_classes, image_size=image_size)
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(1, 3, image_size, image_size))
    except Exception as error:  # noqa: BLE001 - the model's own failure, for a person
        from wattlab.train.factory import _reason

        raise ConfigError(
            f"model {name!r} cannot take 3x{image_size}x{image_size} images "
            f"({_reason(error)}); try another --image-size."
        ) from None
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if shape != (1, num_classes):
        got = f"shape {shape}" if shape is not None else f"type {type(out).__name__!r}"
        raise ConfigError(
            f"model {name!r} returned {got} for one 3x{image_size}x{image_size} image; "
            f"wattlab needs logits of shape (1, {num_classes})."
        )
    _CHECKED.add(key)


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (trainable or not), each shared tensor once."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


@contextmanager
def mha_fastpath_off() -> Iterator[None]:
    """Turn off ``nn.MultiheadAttention``'s fused inference path for a counting pass: the fused
    op hides its projections and attention from FlopCounterMode and from leaf-module hooks."""
    mha = getattr(torch.backends, "mha", None)
    if mha is None:
        yield
        return
    was = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(was)


@dataclass(frozen=True)
class ModelProfile:
    """One forward pass of one ``3 x S x S`` image through a model in eval mode.

    Units: ``forward_flops_per_sample`` FLOP (a multiply-add counts 2: matmuls, convolutions and
    scaled-dot-product attention; elementwise ops are not counted);
    ``attention_flops_per_sample`` FLOP of the attention products (QK^T and attention x V),
    already inside the total; ``tokens_per_image`` the longest query sequence an attention op
    saw (0 without attention); ``activation_elements_per_sample`` the elements every operator
    of the pass writes, views and allocations excluded (``op_outputs``; bytes = elements x
    bytes per element at the precision); ``layers`` the leaf modules (each call one Python
    module call a step makes); ``kernels`` the operators of the pass that write (each a kernel
    launch): a step's CPU work is counted as ``layers + kernels`` (PRE's ``launch_s``);
    ``kernels_autocast`` the same under autocast (an AMP step's casts included).
    """

    forward_flops_per_sample: float
    attention_flops_per_sample: float
    tokens_per_image: int
    activation_elements_per_sample: float
    layers: int
    kernels: int = 0
    kernels_autocast: int = 0


_SDPA_OPS = ("_scaled_dot_product_flash_attention_for_cpu",)  # torch counts the CUDA ones


def _attention_mapping(tokens: list[int]) -> dict[Any, Any]:
    """FlopCounterMode formulas for the CPU attention kernels torch does not count itself; each
    call also records its query length in ``tokens``."""
    from torch.utils.flop_counter import sdpa_flop_count

    def formula(query_shape: Any, key_shape: Any, value_shape: Any, *_: Any, **__: Any) -> int:
        tokens.append(int(query_shape[-2]))
        return int(sdpa_flop_count(query_shape, key_shape, value_shape))

    aten = torch.ops.aten
    return {getattr(aten, op): formula for op in _SDPA_OPS if hasattr(aten, op)}


def profile_model(model: nn.Module, image_size: int = DEFAULT_IMAGE_SIZE) -> ModelProfile:
    """Profile ``model`` (see ModelProfile) with one forward pass of a batch of 2 zero images on
    the CPU in eval mode: ``torch.utils.flop_counter.FlopCounterMode`` counts the FLOPs and
    ``op_outputs.OpOutputs`` the elements the operators write; totals are divided by 2.

    The model is copied to the CPU when it lives elsewhere; its mode is restored afterwards.
    A training step costs about 3x the forward FLOPs (forward + backward).
    """
    from torch.utils.flop_counter import FlopCounterMode

    model = getattr(model, "_orig_mod", model)  # torch.compile wrapper -> the module
    model = getattr(model, "module", model)  # DistributedDataParallel -> the module
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    probe = model if on_cpu else copy.deepcopy(model).cpu()
    from wattlab.train.op_outputs import OpOutputs

    leaves = [m for m in probe.modules() if not list(m.children())]
    tokens: list[int] = []
    written = OpOutputs()
    was_training = probe.training
    probe.eval()
    try:
        x = torch.zeros(2, 3, image_size, image_size)
        mapping = _attention_mapping(tokens)
        with torch.no_grad(), mha_fastpath_off():
            with FlopCounterMode(display=False, custom_mapping=mapping) as counter, written:
                probe(x)
        autocast = _autocast_kernels(probe, x, written.ops)
    finally:
        probe.train(was_training)
    per_op = counter.get_flop_counts().get("Global", {})
    attention = sum(v for op, v in per_op.items() if "scaled_dot_product" in str(op))
    return ModelProfile(
        forward_flops_per_sample=counter.get_total_flops() / 2,
        attention_flops_per_sample=attention / 2,
        tokens_per_image=max(tokens, default=0),
        activation_elements_per_sample=written.elements / 2,
        layers=len(leaves),
        kernels=written.ops,
        kernels_autocast=autocast,
    )


def _autocast_kernels(probe: nn.Module, x: torch.Tensor, plain: int) -> int:
    """The writing operators of the same forward pass under autocast to bfloat16 (the CPU's
    autocast standing in for the GPU's): the casts it inserts (a Linear's or a convolution's
    input, weight and bias to bfloat16) are kernels an AMP step launches. ``plain`` where the
    model cannot run under the CPU's autocast."""
    from wattlab.train.op_outputs import OpOutputs

    written = OpOutputs()
    try:
        with torch.no_grad(), mha_fastpath_off(), torch.autocast("cpu", dtype=torch.bfloat16):
            with written:
                probe(x)
    except Exception:  # noqa: BLE001 - an op without a bfloat16 CPU kernel: the plain count
        return plain
    return written.ops


def forward_flops_per_sample(model: nn.Module, image_size: int = DEFAULT_IMAGE_SIZE) -> float:
    """Forward FLOPs for one ``3 x image_size x image_size`` image (see ModelProfile)."""
    return profile_model(model, image_size).forward_flops_per_sample
