"""Doors into wattlab from the tools people already train and track with.

Each integration is an optional extra and is imported on its own, so ``import wattlab`` never
needs transformers, Lightning, MLflow or prometheus-client:

- ``wattlab.integrations.transformers.WattlabCallback``: Hugging Face ``Trainer`` callback
  (``pip install 'wattlab[transformers]'``);
- ``wattlab.integrations.lightning.WattlabCallback``: PyTorch Lightning callback
  (``wattlab[lightning]``);
- ``wattlab.integrations.mlflow``: stored runs (or live runs) as MLflow runs (``wattlab[mlflow]``);
- ``wattlab.integrations.prometheus``: a scrape endpoint over an ``EnergyMonitor``
  (``wattlab[prometheus]``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from wattlab.errors import WattlabError


class MissingExtraError(WattlabError):
    """An integration was asked for but its optional dependency is not installed."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise one sentence naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(
            f"{what} needs the {module!r} package, which is not installed; "
            f"pip install 'wattlab[{extra}]'."
        ) from None
