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

from wattlab.extras import MissingExtraError, require

__all__ = ["MissingExtraError", "require"]
