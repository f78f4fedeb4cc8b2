"""Doors into wattlab from the tools people already train and track with.

Each integration is an optional extra and is imported on its own, so ``import wattlab`` never
needs transformers, Lightning or MLflow:

- ``wattlab.integrations.transformers.WattlabCallback``: Hugging Face ``Trainer`` callback
  (the ``transformers`` extra);
- ``wattlab.integrations.lightning.WattlabCallback``: PyTorch Lightning callback
  (``wattlab[lightning]``);
- ``wattlab.integrations.mlflow``: stored runs (or live runs) as MLflow runs (``wattlab[mlflow]``).

The Prometheus endpoint (``wattlab[prometheus]``) is served by the monitor itself, so it lives in
the measuring core: ``wattlab.monitor.prometheus``.
"""

from __future__ import annotations

from wattlab.extras import MissingExtraError, require

__all__ = ["MissingExtraError", "require"]
