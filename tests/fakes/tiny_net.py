"""A tiny convolutional network for probe tests on 2 CPU cores: a few milliseconds a step, so
the probe's set-up, rounds and windows all run inside a short budget. A factory, as a user's
would be: ``--model-factory tests/fakes/tiny_net.py:tiny_net``."""

from __future__ import annotations

from torch import nn


def tiny_net(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, num_classes),
    )
