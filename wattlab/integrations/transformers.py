"""Energy of a Hugging Face ``Trainer`` run (the ``transformers`` extra).

    from wattlab.integrations.transformers import WattlabCallback

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=test,
                      callbacks=[WattlabCallback(db="wattlab.db")])
    trainer.train()

(``trainer.add_callback(WattlabCallback(...))`` and ``WattlabCallback(...).attach(trainer)`` do
the same.)

Windows: ``train`` (all of ``trainer.train()``, evaluations during it included), one per epoch
and one per evaluation. At the end of each, the numbers of ``window_metrics`` (energy per
component kind and per provenance, time, mean power, CO2e with its low/high range and the
intensity used) go through ``trainer.log`` under ``wattlab/train/...``, ``wattlab/epoch/...``,
``wattlab/eval/...``, so every ``report_to`` integration (W&B, MLflow, TensorBoard) records them.
With ``db=``, the run is stored in a wattlab database with ``TrainingArguments`` as its config,
and with the tokens it trained on when its batches carry an ``attention_mask`` (its ones: the
tokens that are not padding) or ``input_ids`` (their elements): every process counts its own,
summed on the main process, so the report can state the energy per token.

Under accelerate / torchrun DDP every process meters its own GPU, the first process of each
machine meters the host, windows are combined on the main process, and only it logs and
writes.

A callback's hooks are not given their Trainer, and ``trainer.log`` is what reaches the
``report_to`` integrations. So a WattlabCallback passed in ``callbacks=[...]`` (or
``add_callback``) finds the Trainer that calls it, on the call stack of its first hook
(``on_init_end``, or ``on_train_begin`` when it was added later), and attaches itself to it as
``attach`` does: first among the callbacks (the reporting ones are still open when the training
totals arrive), its evaluations metered.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from wattlab.errors import WattlabError
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

_transformers = require("transformers", "transformers", "wattlab's Hugging Face callback")
if TYPE_CHECKING:

    class TrainerCallback:
        """What the checker sees of ``transformers.TrainerCallback`` (no-op hooks we override):
        following transformers' own types would add thousands of modules to every check."""

else:
    TrainerCallback = _transformers.TrainerCallback

if TYPE_CHECKING:
    import torch

_Evaluate = Callable[..., dict[str, float]]  # Trainer.evaluate: its metrics by name
_TrainingStep = Callable[..., Any]  # Trainer.training_step(model, inputs, ...): the loss


def batch_tokens(inputs: object) -> int | None:
    """The tokens of one training batch: the ones of its ``attention_mask`` (padding left out),
    else the elements of its ``input_ids``; None when it carries neither (not a text batch)."""
    if not isinstance(inputs, dict):
        return None
    for key in ("attention_mask", "input_ids"):
        value = inputs.get(key)
        if value is None:
            continue
        if key == "attention_mask" and hasattr(value, "sum"):
            return int(value.sum())
        if hasattr(value, "numel"):
            return int(value.numel())
    return None


class _Args(Protocol):
    """The fields of ``transformers.TrainingArguments`` the callback reads."""

    process_index: int
    local_process_index: int
    world_size: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    device: torch.device

    def to_dict(self) -> dict[str, Any]: ...


class _State(Protocol):
    """The fields of ``transformers.TrainerState`` the callback reads."""

    epoch: float | None
    global_step: int
    is_world_process_zero: bool
    log_history: list[dict[str, float]]


class _CallbackHandler(Protocol):
    callbacks: list[object]


class _Trainer(Protocol):
    """What the callback uses of a ``transformers.Trainer``."""

    args: _Args
    state: _State
    model: object
    callback_handler: _CallbackHandler
    evaluate: _Evaluate
    training_step: _TrainingStep

    def log(self, logs: dict[str, float]) -> None: ...


# TrainingArguments that name where things go, not what is trained: kept, but not hashed.
_NOT_HASHED = (
    "output_dir",
    "logging_dir",
    "run_name",
    "report_to",
    "hub_model_id",
    "hub_token",
    "push_to_hub",
    "overwrite_output_dir",
    "disable_tqdm",
)


def precision_of(args: object) -> str:
    """wattlab's precision name for TrainingArguments' flags."""
    if getattr(args, "bf16", False):
        return "amp-bf16"
    if getattr(args, "fp16", False):
        return "amp-fp16"
    if getattr(args, "tf32", None):
        return "tf32"
    return "fp32"


def rank_of(args: _Args) -> RankInfo:
    return RankInfo(
        rank=int(args.process_index),
        local_rank=int(args.local_process_index),
        world_size=int(args.world_size),
    )


_STACK_DEPTH = 12  # frames between a hook and the Trainer method that fired it (4 today)


def calling_trainer(callback: object) -> _Trainer | None:
    """The ``transformers.Trainer`` whose callback handler is calling ``callback``'s hook now
    (Trainer.__init__ or train -> CallbackHandler.call_event -> the hook), or None."""
    trainer_class = _transformers.Trainer
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_STACK_DEPTH):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        if isinstance(owner, trainer_class) and callback in getattr(handler, "callbacks", ()):
            return owner
        frame = frame.f_back
    return None


class WattlabCallback(TrainerCallback, CallbackSettings):
    """Meter a Trainer's training, epochs and evaluations; log them through ``trainer.log``.
    Pass it in ``Trainer(callbacks=[...])``, to ``trainer.add_callback``, or ``.attach(trainer)``.

    Args: those of ``wattlab.integrations.session.CallbackSettings`` (db, carbon, interval_s,
    powercap_root, cpu_tdp_w, ram_measure, cpu_load, prometheus_port, meters, gather, sweep).
    """

    def __init__(self, db: str | Path | None = None, **settings: Any) -> None:
        CallbackSettings.__init__(self, db, **settings)
        self.trainer: _Trainer | None = None
        self.meter: TrainingMeter | None = None
        self.results: dict[str, Measurement] = {}  # combined windows (main process)
        self.run_id: int | None = None
        self._epoch = 0
        self._evals = 0
        self._eval_metrics: dict[str, float] = {}
        self._tokens: int | None = None  # this process's training tokens (None: no text batch)

    # --- wiring ----------------------------------------------------------------------------
    def attach(self, trainer: _Trainer) -> WattlabCallback:
        """Register with ``trainer`` (ahead of the reporting callbacks, so they are still
        open when the training totals arrive) and meter its evaluations. Returns self."""
        if self.trainer is not None:
            raise WattlabError("this WattlabCallback is already attached to a Trainer.")
        self.trainer = trainer
        handler = trainer.callback_handler
        if self in handler.callbacks:
            handler.callbacks.remove(self)
        handler.callbacks.insert(0, self)
        original = trainer.evaluate

        @functools.wraps(original)
        def evaluate(*args: Any, **kwargs: Any) -> dict[str, float]:
            return self._metered_evaluate(trainer, original, *args, **kwargs)

        trainer.evaluate = evaluate
        step = trainer.training_step

        @functools.wraps(step)
        def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            tokens = batch_tokens(inputs)
            if tokens is not None and self.meter is not None and self.meter.is_open("train"):
                self._tokens = (self._tokens or 0) + tokens
            return step(model, inputs, *args, **kwargs)

        trainer.training_step = training_step
        return self

    def _new_meter(self, args: _Args) -> TrainingMeter:
        return self.new_training_meter(rank_of(args), args.device)

    def _log(self, metrics: dict[str, float]) -> None:
        if self.trainer is not None and self.trainer.state.is_world_process_zero:
            self.trainer.log(dict(metrics))

    def _close(self, key: str, prefix: str) -> Measurement | None:
        assert self.meter is not None
        m = self.meter.end(key)
        if m is not None:
            self.results[key] = m
            self._log(window_metrics(m, prefix))
        return m

    def _attach_to_caller(self) -> None:
        """Passed in ``callbacks=[...]``: attach to the Trainer calling this hook. (``attach``
        moves this callback to the front of the list the handler is walking: the walk goes on
        with the callback after this one, none skipped or called twice.)"""
        if self.trainer is None:
            trainer = calling_trainer(self)
            if trainer is not None:
                self.attach(trainer)

    # --- Trainer events ----------------------------------------------------------------------
    def on_init_end(self, args: _Args, state: _State, control: object, **kwargs: Any) -> None:
        self._attach_to_caller()

    def on_train_begin(self, args: _Args, state: _State, control: object, **kwargs: Any) -> None:
        self._attach_to_caller()
        if self.trainer is None:
            raise WattlabError(
                "WattlabCallback did not find the transformers Trainer calling it (it logs "
                "through trainer.log); attach it by hand: WattlabCallback(...).attach(trainer)."
            )
        if self.meter is not None:  # a train() that raised left its meters open
            self.meter.stop()
        self.results.clear()
        self._epoch = self._evals = 0
        self._eval_metrics = {}
        self._tokens = None
        self.meter = self._new_meter(args)
        self.meter.start()
        self.meter.begin("train")

    def on_epoch_begin(self, args: _Args, state: _State, control: object, **kwargs: Any) -> None:
        if self.meter is None:
            return
        self._epoch += 1
        self.meter.begin(f"epoch:{self._epoch}")

    def on_epoch_end(self, args: _Args, state: _State, control: object, **kwargs: Any) -> None:
        key = f"epoch:{self._epoch}"
        if self.meter is not None and self.meter.is_open(key):
            self._close(key, "wattlab/epoch")

    def on_evaluate(self, args: _Args, state: _State, control: object, **kwargs: Any) -> None:
        metrics = kwargs.get("metrics") or {}
        self._eval_metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}

    def _metered_evaluate(
        self, trainer: _Trainer, original: _Evaluate, *args: Any, **kwargs: Any
    ) -> dict[str, float]:
        meter = self.meter
        own = meter is None or not meter.started
        if meter is None or own:  # evaluate() outside train(): a session of its own
            meter = self.meter = self._new_meter(trainer.args)
            meter.start()
        self._evals += 1
        key = f"eval:{self._evals}"
        meter.begin(key)
        try:
            return original(*args, **kwargs)
        finally:
            self._close(key, "wattlab/eval")
            if own:
                meter.stop()

    def on_train_end(self, args: _Args, state: _State, control: object, **kwargs: Any) -> None:
        if self.meter is None or not self.meter.is_open("train"):
            return
        epoch_key = f"epoch:{self._epoch}"
        if self.meter.is_open(epoch_key):
            self._close(epoch_key, "wattlab/epoch")
        train = self._close("train", "wattlab/train")
        self.meter.stop()
        traces = self.meter.gather(self.meter.trace)
        counts = self.meter.gather(self._tokens)  # a collective: every process counts its own
        if train is None or self.db is None:
            return
        trace = sorted(s for part in traces or [] for s in part)
        # every process's count, or none: a process that saw no text batch makes it unknown
        tokens = sum(counts) if counts and all(c is not None for c in counts) else None
        if self.trainer is not None:  # on_train_begin refuses to start without one
            self.run_id = self._store(self.trainer, self.db, args, state, train, trace, tokens)

    # --- the database ----------------------------------------------------------------------
    def _store(
        self,
        trainer: _Trainer,
        db: str | Path,
        args: _Args,
        state: _State,
        train: Measurement,
        trace: list[tuple[float, str, float]],
        tokens: int | None = None,
    ) -> int:
        model = trainer.model
        model_config = getattr(model, "config", None)
        model_name = getattr(model_config, "model_type", None) or type(model).__name__
        args_dict = args.to_dict()
        hashed = {k: v for k, v in args_dict.items() if k not in _NOT_HASHED}
        config = {
            "framework": "transformers",
            "transformers_version": _transformers.__version__,
            "training_arguments": hashed,
            "model_class": type(model).__name__,
            "model_config": model_config.to_dict() if model_config is not None else None,
        }
        world = int(args.world_size)
        batch = (
            int(args.per_device_train_batch_size) * world * int(args.gradient_accumulation_steps)
        )
        precision = precision_of(args)
        device = args.device.type
        label = f"{model_name} {world}x{'GPU' if device == 'cuda' else device.upper()} "
        label += f"{precision} bs{batch}"
        train_loss = next(
            (h["train_loss"] for h in reversed(state.log_history) if "train_loss" in h), None
        )
        row = run_row(
            config=config,
            label=label,
            train=train,
            started_at=(self.meter.started_at if self.meter else None) or train.started_at,
            model=model_name,
            precision=precision,
            device=device,
            world_size=world,
            batch_size=batch,
            epochs=float(state.epoch) if state.epoch is not None else None,
            samples=int(state.global_step) * batch,
            accuracy=self._eval_metrics.get("eval_accuracy"),
            train_loss=train_loss,
            sweep=self.sweep,
            tokens=tokens,
        )
        row["config_json"] = {**config, "training_arguments": args_dict}
        try:  # what eval_accuracy was scored on, so the report can hold it against chance
            row["test_size"] = len(trainer.eval_dataset)  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            pass
        windows = []
        for key, m in self.results.items():
            name, _, index = key.partition(":")
            windows.append(window_row(name, int(index) if index else None, m, None))
        return store_run(db, row, windows, trace)
