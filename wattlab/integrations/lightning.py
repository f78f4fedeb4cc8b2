"""Energy of a PyTorch Lightning fit (the ``lightning`` extra).

    from wattlab.integrations.lightning import WattlabCallback

    trainer = pl.Trainer(max_epochs=3, callbacks=[WattlabCallback(db="wattlab.db")])
    trainer.fit(model, train_loader, val_loader)

Windows: ``train`` (from ``on_train_start`` to ``on_train_end``), one per training epoch (in
Lightning 2 an epoch's end-of-epoch validation runs before ``on_train_epoch_end``, so it is inside
that epoch's window) and one per validation run (``eval``; the sanity check is not metered). At
the end of each, the numbers of ``window_metrics`` go to every logger of the Trainer
(``logger.log_metrics``) under ``wattlab/train/...``, ``wattlab/epoch/...``,
``wattlab/eval/...``. With ``db=``, the run is stored in a wattlab database with the
module's hyper-parameters and the Trainer's settings as its config.

Under DDP every process meters its own GPU, the first process of each machine meters the host,
windows are combined on global rank 0, and only it logs and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, SupportsFloat, SupportsIndex

from wattlab.experiment.db.record import window_row
from wattlab.integrations import require
from wattlab.integrations.session import (
    CallbackSettings,
    RankInfo,
    TrainingMeter,
    run_row,
    store_run,
    window_metrics,
)
from wattlab.monitor import Measurement

_pl = require("pytorch_lightning", "lightning", "wattlab's Lightning callback")
if TYPE_CHECKING:

    class Callback:
        """What the checker sees of ``pytorch_lightning.Callback`` (no-op hooks we override):
        following Lightning's own types would add its whole package to every check."""

else:
    Callback = _pl.Callback

if TYPE_CHECKING:
    import torch


class _Logger(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...


class _Strategy(Protocol):
    @property
    def root_device(self) -> torch.device: ...


class _Trainer(Protocol):
    """What the callback uses of a ``pytorch_lightning.Trainer``."""

    loggers: list[_Logger]
    strategy: _Strategy
    global_rank: int
    local_rank: int
    world_size: int
    global_step: int
    current_epoch: int
    sanity_checking: bool
    precision: object  # "bf16-mixed", "32-true", ... (an int in older releases)
    max_epochs: int | None
    max_steps: int
    gradient_clip_val: float | None
    callback_metrics: dict[str, object]  # mostly 0-d tensors


_PRECISION = {"bf16": "amp-bf16", "16": "amp-fp16", "32": "fp32", "64": "fp64"}
_ACCURACY_KEYS = ("val_accuracy", "val_acc", "accuracy", "acc")


def precision_name(precision: object) -> str:
    """wattlab's precision name for Lightning's ("32-true", "bf16-mixed", "16-mixed", ...)."""
    text = str(precision)
    head = text.split("-", 1)[0]
    if head == "bf16" and "true" in text:
        return "bf16"
    if head == "16" and "true" in text:
        return "fp16"
    return _PRECISION.get(head, text)


def _number(value: object) -> float | None:
    """A logged metric (a 0-d tensor, a number) as a float; None when it is not one."""
    try:
        if hasattr(value, "item"):
            value = value.item()
        if not isinstance(value, (str, bytes, SupportsFloat, SupportsIndex)):
            return None  # float() would raise TypeError
        return float(value)
    except (TypeError, ValueError):
        return None


class WattlabCallback(Callback, CallbackSettings):
    """Meter a Lightning fit, its epochs and validations; log them to the Trainer's loggers.

    Args: those of ``wattlab.integrations.session.CallbackSettings`` (db, carbon, interval_s,
    powercap_root, cpu_tdp_w, ram_measure, cpu_load, prometheus_port, meters, gather, sweep).
    """

    def __init__(self, db: str | Path | None = None, **settings: Any) -> None:
        CallbackSettings.__init__(self, db, **settings)
        self.meter: TrainingMeter | None = None
        self.results: dict[str, Measurement] = {}
        self.logged: list[dict[str, float]] = []  # what went to the loggers, in order
        self.run_id: int | None = None
        self._evals = 0

    def _close(self, trainer: _Trainer, key: str, prefix: str) -> Measurement | None:
        assert self.meter is not None
        m = self.meter.end(key)
        if m is not None:
            self.results[key] = m
            metrics = window_metrics(m, prefix)
            self.logged.append(metrics)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        return m

    # --- hooks -----------------------------------------------------------------------------
    def on_train_start(self, trainer: _Trainer, pl_module: object) -> None:
        device = trainer.strategy.root_device
        rank = RankInfo(
            rank=int(trainer.global_rank),
            local_rank=int(trainer.local_rank),
            world_size=int(trainer.world_size),
        )
        if self.meter is not None:
            self.meter.stop()
        self.results.clear()
        self.logged.clear()
        self._evals = 0
        self.meter = self.new_training_meter(rank, device)
        self.meter.start()
        self.meter.begin("train")

    def on_train_epoch_start(self, trainer: _Trainer, pl_module: object) -> None:
        if self.meter is not None and self.meter.started:
            self.meter.begin(f"epoch:{trainer.current_epoch + 1}")

    def on_train_epoch_end(self, trainer: _Trainer, pl_module: object) -> None:
        key = f"epoch:{trainer.current_epoch + 1}"
        if self.meter is not None and self.meter.is_open(key):
            self._close(trainer, key, "wattlab/epoch")

    def on_validation_start(self, trainer: _Trainer, pl_module: object) -> None:
        if trainer.sanity_checking or self.meter is None or not self.meter.started:
            return
        self._evals += 1
        self.meter.begin(f"eval:{self._evals}")

    def on_validation_end(self, trainer: _Trainer, pl_module: object) -> None:
        key = f"eval:{self._evals}"
        if self.meter is not None and self.meter.is_open(key):
            self._close(trainer, key, "wattlab/eval")

    def on_train_end(self, trainer: _Trainer, pl_module: object) -> None:
        if self.meter is None or not self.meter.is_open("train"):
            return
        for key in sorted(self.meter.open_names() - {"train"}):  # an epoch cut short by max_steps
            self._close(
                trainer, key, "wattlab/epoch" if key.startswith("epoch") else "wattlab/eval"
            )
        train = self._close(trainer, "train", "wattlab/train")
        self.meter.stop()
        traces = self.meter.gather(self.meter.trace)
        if train is None or self.db is None:
            return
        trace = sorted(s for part in traces or [] for s in part)
        self.run_id = self._store(self.db, trainer, pl_module, train, trace)

    def on_exception(self, trainer: _Trainer, pl_module: object, exception: BaseException) -> None:
        if self.meter is not None:
            self.meter.stop()

    # --- the database ----------------------------------------------------------------------
    def _store(
        self,
        db: str | Path,
        trainer: _Trainer,
        pl_module: object,
        train: Measurement,
        trace: list[tuple[float, str, float]],
    ) -> int:
        world = int(trainer.world_size)
        loader = getattr(trainer, "train_dataloader", None)
        per_device = getattr(loader, "batch_size", None)
        accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        batch = int(per_device) * world * accumulate if per_device else None
        precision = precision_name(trainer.precision)
        device = trainer.strategy.root_device.type
        hparams = dict(getattr(pl_module, "hparams", {}) or {})
        config = {
            "framework": "lightning",
            "lightning_version": _pl.__version__,
            "module_class": type(pl_module).__name__,
            "hparams": hparams,
            "trainer": {
                "max_epochs": trainer.max_epochs,
                "max_steps": trainer.max_steps,
                "precision": str(trainer.precision),
                "accumulate_grad_batches": accumulate,
                "world_size": world,
                "strategy": type(trainer.strategy).__name__,
                "gradient_clip_val": trainer.gradient_clip_val,
            },
        }
        metrics = trainer.callback_metrics
        accuracy = next((_number(metrics[k]) for k in _ACCURACY_KEYS if k in metrics), None)
        loss = next((_number(metrics[k]) for k in ("train_loss", "loss") if k in metrics), None)
        model = type(pl_module).__name__
        label = f"{model} {world}x{'GPU' if device == 'cuda' else device.upper()} {precision}"
        if batch:
            label += f" bs{batch}"
        row = run_row(
            config=config,
            label=label,
            train=train,
            started_at=(self.meter.started_at if self.meter else None) or train.started_at,
            model=model,
            precision=precision,
            device=device,
            world_size=world,
            batch_size=batch,
            epochs=float(trainer.current_epoch),
            samples=int(trainer.global_step) * batch if batch else None,
            accuracy=accuracy,
            train_loss=loss,
            sweep=self.sweep,
        )
        windows = []
        for key, m in self.results.items():
            name, _, index = key.partition(":")
            windows.append(window_row(name, int(index) if index else None, m, None))
        return store_run(db, row, windows, trace)
