"""One warm process, one model: short training windows of several candidates, interleaved.

The probe (``wattlab advise --probe``) compares configurations that differ in precision, CUDA
graphs and batch size. Starting a run for each costs seconds of set-up that measure nothing
(a process, the data, the model); so here the model, its optimizer and the data are built
once, on the device, and every candidate trains the same model:

* ``prepare(shape)`` is a candidate's own set-up: real training steps until the step time is
  steady (cuDNN's autotuning of a new shape or dtype happens in the first of them, with
  ``cudnn.benchmark`` on exactly as in ``run_training``, so the probe runs the kernels the
  training would run), and for CUDA graphs the capture. It is timed and kept apart from the
  windows.
* ``window(shape, seconds, hooks, name)`` switches to the candidate in place (the TF32 flags
  of its precision; its autocast dtype and scaler; its captured graph), runs one untimed step,
  and then trains ``seconds`` worth of steps at the candidate's steady step time between
  ``hooks.begin(name)`` and ``hooks.end(name, samples=...)``. The caller's hooks measure the
  energy (``EnergyMonitor`` windows synchronise the device at both edges).

The training step is ``loop.TrainStep``, the same object ``run_training`` steps with; only the
order of the steps is the probe's. Weights keep training across windows (energy per image does
not depend on the weights' values); nothing here is stored.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from wattlab.errors import ConfigError
from wattlab.train.config import RunConfig
from wattlab.train.data import (
    Dataset,
    DeviceData,
    DevicePlan,
    default_cache_dir,
    load_dataset,
    plan_epoch,
)
from wattlab.train.loop import (
    WARMUP_STEADY_STEPS,
    TrainStep,
    WindowHooks,
    _GraphedForwardBackward,
    _make_optimizer,
    _sync,
    apply_precision_flags,
    set_precision,
    steady,
)
from wattlab.train.models import build_model
from wattlab.train.recipe import lr_at as recipe_lr_at
from wattlab.train.recipe import resolve, zero_init_residual

# a candidate's set-up stops at a steady step time or after this many steps, whichever first
PREPARE_MAX_STEPS = 25
LR_HORIZON_STEPS = 1000  # the learning rate of the probe's steps: the recipe's at mid-warm-up


@dataclass(frozen=True)
class Shape:
    """A candidate as the trainer sees it."""

    precision: str
    batch_size: int
    cuda_graphs: bool = False

    def describe(self) -> str:
        graphs = ", CUDA graphs" if self.cuda_graphs else ""
        return f"{self.precision}, batch {self.batch_size}{graphs}"


@dataclass(frozen=True)
class Prepared:
    """A candidate's set-up: its wall time (autotuning, capture, the steps to a steady step
    time), the steps it took, the steady step time (s) that sizes its windows and the first
    step's wall time (s; where cuDNN autotunes a new shape or dtype)."""

    shape: Shape
    setup_s: float
    warmup_steps: int
    step_s: float
    first_step_s: float = 0.0


@dataclass(frozen=True)
class Window:
    """One measured window: its name, the steps and images trained inside it and its wall
    time (s, host clock between the hooks' calls)."""

    name: str
    shape: Shape
    steps: int
    images: int
    duration_s: float


@dataclass
class _Candidate:
    step: TrainStep
    plan: DevicePlan
    prepared: Prepared
    cursor: int = 0


class InterleavedTrainer:
    """Build the model, optimizer and data once on ``device`` (see the module docstring).
    ``cfg`` gives the model, stem, image size, data and recipe; its precision and batch size
    are the candidates' (``Shape``). ``dataset``/``model`` replace the loaded ones (tests)."""

    def __init__(
        self,
        cfg: RunConfig,
        device: torch.device,
        *,
        dataset: Dataset | None = None,
        model: nn.Module | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        started = clock()
        self.cfg = cfg
        self.device = device
        self.clock = clock
        if dataset is None:
            dataset = load_dataset(cfg, cache_dir=default_cache_dir())
        self.data = DeviceData(dataset, device, image_size=cfg.image_size)
        torch.manual_seed(cfg.run_seed)
        net = model or build_model(
            cfg.model, stem=cfg.stem, num_classes=dataset.num_classes, image_size=cfg.image_size
        )
        self.recipe = resolve(cfg, net)
        if self.recipe.zero_init_residual:
            zero_init_residual(net)
        # channels_last on CUDA, as in run_training (Module.to's stub omits memory_format)
        self.net = net.to(device, memory_format=self.data.memory_format)  # type: ignore[call-overload]
        self.net.train()
        self.optimizer = _make_optimizer(self.net, self.recipe, cfg.momentum, device)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        self.lr = recipe_lr_at(LR_HORIZON_STEPS // 50, LR_HORIZON_STEPS, self.recipe)
        self._candidates: dict[Shape, _Candidate] = {}
        self._current: Shape | None = None
        _sync(device)
        self.setup_s = clock() - started

    @property
    def prepared(self) -> list[Prepared]:
        return [c.prepared for c in self._candidates.values()]

    def _check(self, shape: Shape) -> None:
        if self.device.type != "cuda" and shape.cuda_graphs:
            raise ConfigError("CUDA graphs need a CUDA GPU.")
        if shape.batch_size < 1:
            raise ConfigError(f"a batch size must be at least 1, got {shape.batch_size}.")

    def _switch(self, shape: Shape) -> _Candidate:
        """Make ``shape`` the one the next steps train: its precision's flags, and its captured
        graph's gradients (an eager step in between freed them)."""
        candidate = self._candidates[shape]
        if self._current != shape:
            apply_precision_flags(shape.precision, self.device)
            if candidate.step.graphed is not None:
                candidate.step.graphed.rebind_grads()
            else:
                self.optimizer.zero_grad(set_to_none=True)
            self._current = shape
        return candidate

    def _steps(self, candidate: _Candidate, count: int) -> None:
        plan = candidate.plan
        for _ in range(count):
            inputs, labels = self.data.train_batch(plan, candidate.cursor % plan.steps)
            candidate.step(inputs, labels, self.lr)
            candidate.cursor += 1

    def prepare(self, shape: Shape, *, stop_at: float | None = None) -> Prepared:
        """``shape``'s set-up (see the module docstring); again for a prepared shape, its
        first ``Prepared``. ``stop_at`` (this trainer's clock): no set-up step starts after it,
        though at least WARMUP_STEADY_STEPS run so a step time is known."""
        if shape in self._candidates:
            return self._candidates[shape].prepared
        self._check(shape)
        started = self.clock()
        autocast, scaler = set_precision(shape.precision, self.device)
        step = TrainStep(self.net, self.criterion, self.optimizer, self.recipe, autocast, scaler)
        epoch = len(self._candidates) + 1
        plan = self.data.prepare(
            plan_epoch(self.data.train_size, shape.batch_size, seed=self.cfg.run_seed, epoch=epoch)
        )
        candidate = _Candidate(step, plan, Prepared(shape, 0.0, 0, 0.0))
        self._candidates[shape] = candidate
        self._current = None
        self._switch(shape)
        times: list[float] = []
        for i in range(PREPARE_MAX_STEPS):
            t_step = self.clock()
            self._steps(candidate, 1)
            _sync(self.device)
            times.append(self.clock() - t_step)
            if steady(times):
                break
            if stop_at is not None and i + 1 >= WARMUP_STEADY_STEPS and self.clock() >= stop_at:
                break
        first = times[:1]
        if shape.cuda_graphs:
            inputs, labels = self.data.train_batch(plan, 0)
            graph_autocast = (
                functools.partial(autocast, cache_enabled=False)
                if shape.precision.startswith("amp-")
                else autocast
            )
            step.graphed = _GraphedForwardBackward(
                self.net, self.criterion, graph_autocast, self.optimizer, inputs, labels
            )
            times = []  # the step time that sizes the windows is the replayed one
            for _ in range(WARMUP_STEADY_STEPS):
                t_step = self.clock()
                self._steps(candidate, 1)
                _sync(self.device)
                times.append(self.clock() - t_step)
        step_s = statistics.median(times[-WARMUP_STEADY_STEPS:])
        first_step_s = first[0] if first else 0.0
        prepared = Prepared(shape, self.clock() - started, len(times), step_s, first_step_s)
        candidate.prepared = prepared
        return prepared

    def window(self, shape: Shape, seconds: float, hooks: WindowHooks, name: str) -> Window:
        """Train about ``seconds`` of ``shape`` (a prepared one) between the hooks' begin and
        end of window ``name``, after one untimed step (see the module docstring). Steps run
        until ``seconds`` have passed (one at least), not a count planned from the set-up's
        step time: on a busy machine a step can take many times what it took at set-up, and
        the window would stretch as many times (or shrink)."""
        candidate = self._switch(shape)
        self._steps(candidate, 1)  # untimed: the switch's first step (caches, allocator)
        hooks.begin(name)
        t0 = self.clock()
        steps = 0
        while steps == 0 or self.clock() - t0 < seconds:
            self._steps(candidate, 1)
            steps += 1
        hooks.end(name, samples=steps * shape.batch_size)
        return Window(name, shape, steps, steps * shape.batch_size, self.clock() - t0)


__all__ = ["PREPARE_MAX_STEPS", "InterleavedTrainer", "Prepared", "Shape", "Window"]
