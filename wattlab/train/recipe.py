"""The training recipe: optimiser, learning rate, warm-up and clipping for a model.

Recipe 1 (the old one) trains every model with SGD (Nesterov) at ``cfg.lr`` as given for
the global batch, a warm-up over 5 % of the steps and no clipping (docs/engine.md says which
models it left at chance). Recipe 2, the default, picks per model *family*, read from the module
itself (so it holds for any torchvision model and any factory):

============  ==============================  =========================================
family        how it is recognised            recipe 2
============  ==============================  =========================================
batchnorm     has BatchNorm layers            SGD, Nesterov; residual branches' last
                                              BatchNorm starts at zero (ResNets)
layernorm     LayerNorm/GroupNorm, no         AdamW, weight decay 0.05, betas 0.9/0.999
              BatchNorm (ViT, ConvNeXt,
              Swin)
unnormalised  no normalisation layers (VGG)   SGD, Nesterov, a tenth of the rate
============  ==============================  =========================================

For every family: the peak rate is ``cfg.lr`` (read as SGD's rate at batch 256; AdamW takes
``cfg.lr x 0.005``, 1e-3 at the default 0.2) times ``sqrt(batch / 256)`` (square-root
scaling: linear scaling overshoots at batch 2048 in short budgets), a linear warm-up over 10 %
of the steps (at least 50, at most a fifth of a short budget), cosine decay, and the global
gradient norm clipped (5 for batchnorm models, 1 for the others) without a host sync.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from torch import nn

from wattlab.train.config import RunConfig

Family = Literal["batchnorm", "layernorm", "unnormalised"]
REFERENCE_BATCH = 256  # recipe 2's cfg.lr is the rate at this global batch
ADAMW_LR_FACTOR = 0.005  # AdamW's peak rate per unit of cfg.lr (0.2 -> 1e-3)
ADAMW_WEIGHT_DECAY = 0.05
UNNORMALISED_LR_FACTOR = 0.1
CLIP_NORM = {"batchnorm": 5.0, "layernorm": 1.0, "unnormalised": 1.0}


@dataclass(frozen=True)
class Recipe:
    """What a run trains with, resolved from its config and model."""

    version: int
    family: Family
    optimizer: Literal["sgd", "adamw"]
    peak_lr: float  # for the global batch
    weight_decay: float
    warmup_fraction: float  # of the budget's steps: the learning rate rises linearly
    warmup_min_steps: int  # but over at least this many (or a fifth of a short budget)
    clip_grad_norm: float | None  # the global gradient norm is clipped to this
    zero_init_residual: bool  # the last BatchNorm of each residual branch starts at zero

    def describe(self) -> str:
        clip = "none" if self.clip_grad_norm is None else f"{self.clip_grad_norm:g}"
        return (
            f"recipe {self.version} ({self.family}): {self.optimizer} peak lr "
            f"{self.peak_lr:.4g}, weight decay {self.weight_decay:g}, warm-up "
            f"{self.warmup_fraction:.0%} of the steps, clip {clip}"
        )


_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
_OTHER_NORMS = (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm2d)


def model_family(net: nn.Module) -> Family:
    """Which family's recipe ``net`` gets, from the normalisation layers it holds."""
    modules = list(net.modules())
    if any(isinstance(m, _BATCH_NORMS) for m in modules):
        return "batchnorm"
    if any(isinstance(m, _OTHER_NORMS) for m in modules):
        return "layernorm"
    return "unnormalised"


def resolve(cfg: RunConfig, net: nn.Module) -> Recipe:
    """The recipe ``cfg`` trains ``net`` with (see the module docstring)."""
    family = model_family(net)
    if cfg.recipe == 1:
        return Recipe(1, family, "sgd", cfg.lr, cfg.weight_decay, 0.05, 50, None, False)
    scale = math.sqrt(cfg.batch_size / REFERENCE_BATCH)
    if family == "layernorm":
        return Recipe(
            2,
            family,
            "adamw",
            cfg.lr * ADAMW_LR_FACTOR * scale,
            ADAMW_WEIGHT_DECAY,
            0.1,
            50,
            CLIP_NORM[family],
            False,
        )
    factor = UNNORMALISED_LR_FACTOR if family == "unnormalised" else 1.0
    return Recipe(
        2,
        family,
        "sgd",
        cfg.lr * factor * scale,
        cfg.weight_decay,
        0.1,
        50,
        CLIP_NORM[family],
        family == "batchnorm",
    )


def zero_init_residual(net: nn.Module) -> int:
    """Zero the last BatchNorm weight of every torchvision residual block (ResNet, ResNeXt,
    Wide ResNet), as torchvision's ``zero_init_residual=True`` does: each block starts as the
    identity, which lets deep ResNets train at the full rate. Returns the blocks changed."""
    from torchvision.models.resnet import BasicBlock, Bottleneck

    changed = 0
    for module in net.modules():
        last = None
        if isinstance(module, Bottleneck):
            last = module.bn3
        elif isinstance(module, BasicBlock):
            last = module.bn2
        if isinstance(last, nn.BatchNorm2d) and last.weight is not None:
            nn.init.zeros_(last.weight)
            changed += 1
    return changed


def lr_at(step: int, total_steps: int, recipe: Recipe) -> float:
    """Learning rate of 0-based global ``step``: linear warm-up over ``warmup_fraction`` of
    the steps (at least ``warmup_min_steps``, at most a fifth of the budget), then cosine
    decay towards 0. It depends only on the global step, so it is the same for any world
    size."""
    warm = max(
        1,
        round(recipe.warmup_fraction * total_steps),
        min(recipe.warmup_min_steps, total_steps // 5),
    )
    if step < warm:
        return recipe.peak_lr * (step + 1) / warm
    progress = (step - warm) / max(1, total_steps - warm)
    return recipe.peak_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
