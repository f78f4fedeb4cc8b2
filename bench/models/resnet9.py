"""A user's own network for the probe's evaluation (bench/probe_evaluate.py): the ResNet-9 of the
DAWNBench CIFAR-10 entries (conv-BN-ReLU blocks, two residual blocks, 6.5 M parameters), built
through a model factory as a user's would be: ``--model-factory bench/models/resnet9.py:resnet9``.
"""

from __future__ import annotations

from torch import nn


def _block(c_in: int, c_out: int, pool: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_block(channels, channels), _block(channels, channels))

    def forward(self, x):  # noqa: ANN001, ANN201 - a plain nn.Module
        return x + self.body(x)


def resnet9(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        _block(3, 64),
        _block(64, 128, pool=True),
        _Residual(128),
        _block(128, 256, pool=True),
        _block(256, 512, pool=True),
        _Residual(512),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(512, num_classes),
    )
