"""``wattlab advise``: the least-energy way to train a model within a time limit.

- ``knobs``: which settings may change (precision, graphs, power limit, GPU count; batch size
  only when asked) and why some are not varied;
- ``ranking``: least energy among the configurations that meet the limit (pure arithmetic);
- ``advisor``: the candidates predicted by PRE and the power-cap law, ranked (before training);
- ``stored``: the same from one stored run, with PRE corrected by what it measured;
- ``evaluation``: the advice scored on models PRE never saw (leave one model out) and the
  power-limit knob on the Zeus profiles (leave one file out).

Names load on first use, so ``import wattlab.estimate.advise`` imports no pandas or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Advice": "advisor",
    "Correction": "advisor",
    "advise": "advisor",
    "advise_from_run": "stored",
    "Limit": "ranking",
    "Option": "ranking",
    "Setting": "ranking",
    "rank": "ranking",
    "parse_allow": "knobs",
    "evaluate_advice": "evaluation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'wattlab.estimate.advise' has no attribute {name!r}")
    module = importlib.import_module(f"wattlab.estimate.advise.{_EXPORTS[name]}")
    return getattr(module, name)
