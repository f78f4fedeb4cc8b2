"""Architecture families of models, from their names (torchvision's constructor names).

PRE uses the family to say when a prediction leaves the architectures it learnt from (a
ConvNeXt predicted from ResNets is an extrapolation even when its FLOPs lie inside the data)
and to hold whole families out when it is evaluated (leave-one-family-out).

``model_family`` needs no torch: it reads the name only. A name that is not a torchvision
constructor (a user's factory, a name wattlab does not know, no name) is ``custom``.
"""

from __future__ import annotations

import re

CUSTOM = "custom"
# (family, pattern on the lower-cased name), first match wins: ResNeXt and Wide ResNet before
# ResNet, whose prefix they share. Families outside the list (AlexNet, GoogLeNet ...) are
# torchvision architectures too and keep their own names rather than pass for ``custom``.
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("resnext", r"(resnext|wide_resnet)\d"),  # ResNeXt and Wide ResNet: one family
    ("resnet", r"resnet\d"),
    ("vgg", r"vgg\d"),
    ("mobilenet", r"mobilenet_v\d"),
    ("efficientnet", r"efficientnet_(b\d|v2_)"),
    ("densenet", r"densenet\d"),
    ("regnet", r"regnet_[xy]_"),
    ("convnext", r"convnext_"),
    ("shufflenet", r"shufflenet_v\d"),
    ("vit", r"vit(_|$)"),
    ("swin", r"swin_"),
    ("maxvit", r"maxvit_"),
    ("mnasnet", r"mnasnet\d"),
    ("squeezenet", r"squeezenet\d"),
    ("alexnet", r"alexnet$"),
    ("googlenet", r"googlenet$"),
    ("inception", r"inception_v\d"),
)
ARCHITECTURE_FAMILIES = tuple(dict.fromkeys(family for family, _ in _PATTERNS)) + (CUSTOM,)


def model_family(model: object) -> str:
    """The architecture family of a model name: ``resnet``, ``resnext`` (ResNeXt and Wide ResNet),
    ``vgg``, ``mobilenet``, ``efficientnet``, ``densenet``, ``regnet``, ``convnext``,
    ``shufflenet``, ``vit``, another torchvision architecture's name, or ``custom`` (a factory,
    an unknown name, or none)."""
    if not isinstance(model, str) or not model.strip():
        return CUSTOM
    name = model.strip().lower()
    for family, pattern in _PATTERNS:
        if re.match(pattern, name):
            return family
    return CUSTOM


__all__ = ["ARCHITECTURE_FAMILIES", "CUSTOM", "model_family"]
