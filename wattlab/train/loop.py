"""The training loop: one run of one configuration, readable top to bottom.

``run_training`` does, in order (each step is a measurement window the caller can attach energy
to through ``WindowHooks``):

1. ``run``     opens; seeds, precision flags, data on the device, model, optimizer.
2. ``warmup``  real training steps (cuDNN autotuning, torch.compile, NCCL set-up) until the
               step time is steady (at most ``cfg.warmup_steps``), then the model, optimizer
               and RNG go back to their initial state, so the budget trains exactly as if
               there had been no warm-up.
3. ``budget``  the fixed compute budget, with one ``epoch`` window per (1-based) epoch, each
               followed (``cfg.epoch_eval_samples`` > 0) by an ``epoch_eval`` window: accuracy
               on the first N test images, for energy-to-accuracy (inside the budget).
4. ``eval``    accuracy and macro F1 on the test set.
5. ``run``     closes.

The hot loop is kept lean in the style of airbench: the data is on the device, batches are
gathered and augmented there, inputs are channels_last on CUDA, there is no host-device sync
inside a step (the loss is summed on the device and read once per epoch), the optimizer is
fused on CUDA and gradients are freed with ``set_to_none=True``.

With ``cfg.cuda_graphs`` (one GPU), the forward and backward pass of a step are captured once,
during the warm-up, as a CUDA graph and replayed: one launch instead of hundreds of small
kernels, which is what bounds small images on a large GPU. The optimizer step stays eager (its
learning rate changes every step), and the gradients live in the graph's memory.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Concatenate, ParamSpec, Protocol, cast

import torch
import torch.distributed as tdist
from torch import nn

from wattlab.errors import ConfigError
from wattlab.train.config import RunConfig, budget_steps
from wattlab.train.data import Dataset, DeviceData, default_cache_dir, load_dataset, plan_epoch
from wattlab.train.distributed import DistContext
from wattlab.train.models import build_model, count_parameters
from wattlab.train.recipe import Recipe, resolve, zero_init_residual
from wattlab.train.recipe import lr_at as recipe_lr_at

log = logging.getLogger(__name__)

LR_WARMUP_FRACTION = 0.05  # the learning rate rises linearly over the first 5 % of the steps,
LR_WARMUP_MIN_STEPS = 50  # but over at least 50 steps (or a fifth of a short budget):
# a handful of warm-up steps let ResNet-50 diverge at the peak rate in short runs
WARMUP_EPOCH = 0  # the data stream of the warm-up steps; budget epochs are numbered from 1
WARMUP_MIN_STEPS = 3  # the warm-up stops once the last WARMUP_STEADY_STEPS step times agree
WARMUP_STEADY_STEPS = 3  # within WARMUP_STEADY_SPREAD (max/min - 1), or at cfg.warmup_steps
WARMUP_STEADY_SPREAD = 0.15
MARKS_PER_BUDGET = 200  # STEP's step-level marks, when asked for


class WindowHooks(Protocol):
    """Where the caller (the energy monitor) opens and closes measurement windows.

    Names: ``run``, ``warmup``, ``budget``, ``epoch`` (with ``epoch=k``, 1-based), ``eval``.
    ``samples`` on ``end`` counts images over all ranks. The loop adds no device sync for a
    window: the hook synchronises the device itself when it needs to.
    """

    def begin(self, name: str, epoch: int | None = None) -> None: ...

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None: ...


class _NoWindows:
    def begin(self, name: str, epoch: int | None = None) -> None:
        pass

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
        pass


@dataclass(frozen=True)
class EpochStats:
    """One budget epoch: ``samples`` over all ranks, ``train_loss`` the mean label-smoothed
    cross-entropy of its steps over all ranks, ``duration_s`` host wall time (the epoch ends
    with the loss read-out, which waits for the device)."""

    epoch: int
    samples: int
    train_loss: float
    duration_s: float
    eval_accuracy: float | None = None  # on the fixed per-epoch subset, after this epoch


@dataclass(frozen=True)
class TrainResult:
    """What one run trained and how well. Sample counts are global (all ranks)."""

    samples: int  # training samples in the budget (warm-up excluded)
    steps: int  # optimizer steps in the budget
    epochs_completed: float  # steps / steps per epoch (the last epoch may be partial)
    warmup_samples: int  # training samples of the warm-up steps (not in ``samples``)
    train_loss: float  # mean training loss of the last epoch
    accuracy: float  # on the test set, 0..1
    f1_macro: float  # on the test set, 0..1
    per_epoch: list[EpochStats] = field(default_factory=list)
    params: int = 0
    world_size: int = 1
    test_samples: int = 0  # images evaluated
    train_size: int = 0  # images in the training set (an epoch)
    steps_per_epoch: int = 0
    duration_s: float = 0.0  # the budget's host wall time (ends after the last loss read-out)
    warmup_steps: int = 0  # warm-up steps actually run (steady step time, or the maximum)
    # wall time (s) of setup, data, warmup, budget, eval, and of the budget hooks' own opening
    # and closing (budget_open, budget_close: CodeCarbon's start and stop, outside the window)
    phases: dict[str, float] = field(default_factory=dict)
    eval_end_perf_s: float = 0.0  # time.perf_counter() when evaluation ended


@dataclass(frozen=True)
class Budget:
    """The fixed compute budget in optimizer steps of one global batch."""

    steps: int
    steps_per_epoch: int
    batch_size: int

    @property
    def samples(self) -> int:
        return self.steps * self.batch_size

    @property
    def epochs(self) -> int:
        """Epochs started (the last one may be partial)."""
        return math.ceil(self.steps / self.steps_per_epoch)

    def steps_in_epoch(self, epoch: int) -> int:
        """Steps of 1-based ``epoch``."""
        return min(self.steps_per_epoch, self.steps - (epoch - 1) * self.steps_per_epoch)


def plan_budget(cfg: RunConfig, train_size: int) -> Budget:
    """Steps for ``cfg.epochs`` full epochs or ``cfg.budget_samples // batch_size`` steps."""
    steps, per_epoch = budget_steps(cfg, train_size)
    return Budget(steps=steps, steps_per_epoch=per_epoch, batch_size=cfg.batch_size)


def lr_at(step: int, total_steps: int, peak_lr: float) -> float:
    """Recipe 1's learning rate of 0-based global ``step``: linear warm-up over the first
    LR_WARMUP_FRACTION of the steps (at least LR_WARMUP_MIN_STEPS, at most a fifth of the
    budget), then cosine decay towards 0. It depends only on the
    global step, so it is the same for any world size."""
    warm = max(
        1, round(LR_WARMUP_FRACTION * total_steps), min(LR_WARMUP_MIN_STEPS, total_steps // 5)
    )
    if step < warm:
        return peak_lr * (step + 1) / warm
    progress = (step - warm) / max(1, total_steps - warm)
    return peak_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


# A factory of autocast contexts: torch.autocast with the device and dtype bound, or nullcontext.
Autocast = Callable[..., contextlib.AbstractContextManager[object]]


def set_precision(precision: str, device: torch.device) -> tuple[Autocast, torch.amp.GradScaler]:
    """Set the global TF32 flags for ``precision``; return an autocast factory and a scaler.

    fp32: TF32 off. tf32: TF32 on for matmuls and cuDNN convolutions. amp-bf16 / amp-fp16:
    autocast to bfloat16 / float16 with TF32 off for what stays in fp32; amp-fp16 adds a
    GradScaler. On the CPU tf32 is plain fp32 and amp-fp16 is refused.
    """
    if device.type == "cpu":
        if precision == "amp-fp16":
            raise ConfigError(
                "precision 'amp-fp16' needs a CUDA GPU; on the CPU use fp32 or amp-bf16."
            )
        if precision == "tf32":
            log.info("precision tf32 on the CPU is plain fp32 (TF32 is a GPU tensor-core format)")
    apply_precision_flags(precision, device)
    autocast: Autocast
    if precision.startswith("amp-"):
        dtype = torch.bfloat16 if precision == "amp-bf16" else torch.float16
        autocast = functools.partial(torch.autocast, device_type=device.type, dtype=dtype)
    else:
        autocast = contextlib.nullcontext
    # Trick: with a fused optimizer the scaler skips inf steps on the device, without a sync.
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "amp-fp16")
    return autocast, scaler


def apply_precision_flags(precision: str, device: torch.device) -> None:
    """The process-wide flags of ``precision``: TF32 on for tf32 only (matmuls and cuDNN
    convolutions), and cuDNN's autotuning on CUDA. Cheap: the probe calls it at every switch
    between precisions of one warm model."""
    tf32 = precision == "tf32"
    # Legacy flags on purpose: they also set the newer fp32_precision flags consistently.
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # trick: let cuDNN time its kernels (warm-up)


class TrainStep:
    """One optimizer step of a recipe: forward and backward (under ``autocast``, through the
    ``scaler``), gradient clipping, the update, gradients freed. With ``graphed`` set (a
    captured ``_GraphedForwardBackward``), the forward and backward pass is replayed instead.
    The step adds no host-device sync. ``run_training`` makes one per run; the probe
    (``train/interleave.py``) one per candidate, all sharing one model and optimizer."""

    def __init__(
        self,
        model: nn.Module,
        criterion: nn.Module,
        optimizer: torch.optim.Optimizer,
        recipe: Recipe,
        autocast: Autocast,
        scaler: torch.amp.GradScaler,
    ) -> None:
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.recipe = recipe
        self.autocast = autocast
        self.scaler = scaler
        self.clip_params = [
            p for group in optimizer.param_groups for p in group["params"] if p.requires_grad
        ]
        self.graphed: _GraphedForwardBackward | None = None

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor, lr: float) -> torch.Tensor:
        optimizer, recipe = self.optimizer, self.recipe
        for group in optimizer.param_groups:
            group["lr"] = lr  # a Python float: setting it costs no sync
        if self.graphed is not None:
            loss = self.graphed.replay(inputs, labels)  # writes the same .grad tensors every step
            if recipe.clip_grad_norm is not None:  # on the device: no sync
                nn.utils.clip_grad_norm_(self.clip_params, recipe.clip_grad_norm, foreach=True)
            optimizer.step()
            return loss.detach()
        with self.autocast():
            loss = self.criterion(self.model(inputs), labels)
        self.scaler.scale(loss).backward()  # the scaler is a no-op unless amp-fp16
        if recipe.clip_grad_norm is not None:  # on the device: no sync
            self.scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(self.clip_params, recipe.clip_grad_norm, foreach=True)
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad(set_to_none=True)  # trick: free the gradients instead of zeroing
        return loss.detach()


def _make_optimizer(
    net: nn.Module, recipe: Recipe, momentum: float, device: torch.device
) -> torch.optim.Optimizer:
    """The recipe's optimiser: SGD with Nesterov momentum, or AdamW. Trick: no weight decay on
    biases and norm weights (1-D)."""
    decay = [p for p in net.parameters() if p.ndim > 1]
    no_decay = [p for p in net.parameters() if p.ndim <= 1]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]

    def make(*, fused: bool | None = None, foreach: bool | None = None) -> torch.optim.Optimizer:
        if recipe.optimizer == "adamw":
            return torch.optim.AdamW(
                groups, lr=recipe.peak_lr, betas=(0.9, 0.999), fused=fused, foreach=foreach
            )
        return torch.optim.SGD(
            groups,
            lr=recipe.peak_lr,
            momentum=momentum,
            nesterov=momentum > 0,
            fused=fused,
            foreach=foreach,
        )

    if device.type == "cuda":
        try:  # trick: one fused kernel for the whole update (falls back to multi-tensor)
            return make(fused=True)
        except (RuntimeError, TypeError, ValueError):
            return make(foreach=True)
    return make()


def _check(cfg: RunConfig, dist: DistContext) -> None:
    # gpus/nproc count the processes on each node; a run over several nodes has a multiple
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or dist.world_size)
    if cfg.world_size != local or dist.world_size % cfg.world_size:
        raise ConfigError(
            f"the config asks for {cfg.world_size} processes but {dist.world_size} were "
            "started; launch with the matching torchrun --nproc-per-node."
        )
    if cfg.device != dist.device.type:
        raise ConfigError(
            f"the config asks for device {cfg.device!r} but this process runs on "
            f"{dist.device.type!r}."
        )


def _all_reduce_sum(t: torch.Tensor, dist: DistContext) -> torch.Tensor:
    if dist.distributed:
        tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t


def macro_scores(confusion: torch.Tensor) -> tuple[float, float]:
    """Accuracy and macro F1 from a ``[C, C]`` confusion matrix (rows true, columns predicted).

    Macro F1 averages per-class F1 ``2tp / (2tp + fp + fn)`` over the classes that occur in
    the labels or the predictions (as scikit-learn does)."""
    confusion = confusion.double()
    total = confusion.sum()
    if total == 0:
        return 0.0, 0.0
    tp = confusion.diag()
    fp = confusion.sum(dim=0) - tp
    fn = confusion.sum(dim=1) - tp
    denom = 2 * tp + fp + fn
    present = denom > 0
    f1 = (2 * tp[present] / denom[present]).mean()
    return float(tp.sum() / total), float(f1)


P = ParamSpec("P")


def free_threads(cores: int, load_1min: float, current: int) -> int:
    """The threads a CPU run with no ``cpu_threads`` trains on: the cores the machine has free
    (its usable cores minus the 1-minute load average, rounded, at least 1), never more than
    torch's own number. On a busy machine torch's default (every core) oversubscribes it: a
    step beside 2 busy loops on 2 cores took 33.7 s on the default threads and 7.2 s on one
    (issue 48)."""
    free = max(1, int(math.floor(cores - max(0.0, load_1min) + 0.5)))
    return max(1, min(current, free))


def _load_1min() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        return 0.0


@contextlib.contextmanager
def cpu_threads(cfg: RunConfig) -> Iterator[None]:
    """On the CPU: torch's intra-op threads for the run (``cpu_threads``, or ``free_threads``
    without it), and the process's own number back afterwards (a warm worker's next run starts
    as it was)."""
    if cfg.device != "cpu":
        yield
        return
    before = torch.get_num_threads()
    if cfg.cpu_threads is not None:
        wanted = cfg.cpu_threads
    else:
        from wattlab.processes import usable_cores

        wanted = free_threads(usable_cores(), _load_1min(), before)
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _in_cpu_threads(
    train: Callable[Concatenate[RunConfig, P], TrainResult],
) -> Callable[Concatenate[RunConfig, P], TrainResult]:
    """Run ``train(cfg, ...)`` inside ``cpu_threads(cfg)``."""

    @functools.wraps(train)
    def within(cfg: RunConfig, /, *args: P.args, **kwargs: P.kwargs) -> TrainResult:
        with cpu_threads(cfg):
            return train(cfg, *args, **kwargs)

    return within


@_in_cpu_threads
def run_training(
    cfg: RunConfig,
    dist: DistContext,
    windows: WindowHooks | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    *,
    dataset: Dataset | None = None,
    model: nn.Module | None = None,
    eval_samples: int | None = None,
    on_mark: Callable[[int, int], None] | None = None,
) -> TrainResult:
    """Train ``cfg`` on this rank (every rank calls it) and evaluate; see the module doc.

    ``dataset`` replaces ``load_dataset(cfg)`` (tests, or a sweep that loads the data once);
    ``model`` replaces ``build_model(cfg.model, ...)`` (tests and custom studies; it must be
    freshly initialised on every rank, identically, and is moved to the device here).
    ``eval_samples`` evaluates on the first N test images only (a fixed subset; sweeps).
    Windows are closed only on success: after an exception the open ones stay open.
    ``phases`` in the result holds the wall time of set-up, data, warm-up, budget and eval.
    ``on_mark(samples_done, budget_samples)`` is called at the budget's start and then about
    MARKS_PER_BUDGET times (every few steps), with no device sync: STEP's step-level marks.
    On the CPU with ``cfg.cpu_threads`` set, it trains on that many torch threads (``cpu_threads``).
    """
    hooks: WindowHooks = windows if windows is not None else _NoWindows()
    _check(cfg, dist)
    hooks.begin("run")
    device = dist.device
    world = dist.world_size
    phases: dict[str, float] = {}
    t_phase = time.perf_counter()

    # ---- Data ---------------------------------------------------------------------------------
    if dataset is None:  # generated data is cached on disk and in this process
        dataset = load_dataset(cfg, cache_dir=default_cache_dir())
    data = DeviceData(
        dataset, device, image_size=cfg.image_size
    )  # trick: the whole uint8 dataset lives on the device
    test_size = data.test_size if eval_samples is None else min(eval_samples, data.test_size)
    budget = plan_budget(cfg, data.train_size)
    t_now = time.perf_counter()
    phases["data"], t_phase = t_now - t_phase, t_now

    # ---- Setup --------------------------------------------------------------------------------
    autocast, scaler = set_precision(cfg.precision, device)
    torch.manual_seed(cfg.run_seed)  # the same seed on every rank: identical initial weights
    per_rank_batch = cfg.batch_size // world

    # net: the module itself; train_model: what a step calls (DDP and/or compiled around net).
    if model is None:
        net = build_model(
            cfg.model,
            stem=cfg.stem,
            num_classes=dataset.num_classes,
            image_size=cfg.image_size,
        )
    else:
        net = model
    recipe = resolve(cfg, net)
    if recipe.zero_init_residual:
        zero_init_residual(net)
    log.info("%s", recipe.describe())
    # trick: channels_last on CUDA. Module.to takes memory_format; torch's stub omits it.
    net = net.to(device, memory_format=data.memory_format)  # type: ignore[call-overload]
    params = count_parameters(net)
    train_model: nn.Module = net
    if dist.distributed:
        # Trick: gradients as views into the all-reduce buckets (no copy in and out).
        ids = [device.index] if device.type == "cuda" else None
        train_model = nn.parallel.DistributedDataParallel(
            net, device_ids=ids, gradient_as_bucket_view=True
        )
    if cfg.compile:
        # DDP inside compile: graphs split at buckets. torch.compile of a Module returns an
        # OptimizedModule (a Module); its stub says only Callable.
        train_model = cast(nn.Module, torch.compile(train_model))
    eval_model: nn.Module = train_model
    if dist.distributed:  # evaluate without DDP: its forward would sync buffers every batch
        eval_model = cast(nn.Module, torch.compile(net)) if cfg.compile else net
    optimizer = _make_optimizer(net, recipe, cfg.momentum, device)
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    train_step = TrainStep(train_model, criterion, optimizer, recipe, autocast, scaler)

    t_now = time.perf_counter()
    phases["setup"], t_phase = t_now - t_phase, t_now

    # ---- Warm-up: real steps until the step time is steady, then back to the initial state --
    warmup_steps = 0
    if cfg.warmup_steps > 0 or cfg.cuda_graphs:
        hooks.begin("warmup")
        initial = _snapshot(net, optimizer, device)
        train_model.train()
        plan = plan_epoch(
            data.train_size,
            cfg.batch_size,
            seed=cfg.run_seed,
            epoch=WARMUP_EPOCH,
            world_size=world,
            rank=dist.rank,
        )
        batches = data.prepare(plan)
        step_times: list[float] = []
        for i in range(cfg.warmup_steps):
            t_step = time.perf_counter()
            inputs, labels = data.train_batch(batches, i % batches.steps)
            train_step(inputs, labels, recipe_lr_at(i % budget.steps, budget.steps, recipe))
            _sync(device)  # untimed warm-up: a sync per step lets us see the step time
            step_times.append(time.perf_counter() - t_step)
            warmup_steps = i + 1
            if _steady(step_times, dist):
                break
        if cfg.cuda_graphs:  # capture with a real batch's shapes; the restore undoes its steps
            inputs, labels = data.train_batch(batches, 0)
            graph_autocast = (
                functools.partial(autocast, cache_enabled=False)
                if cfg.precision.startswith("amp-")
                else autocast
            )
            train_step.graphed = _GraphedForwardBackward(
                train_model, criterion, graph_autocast, optimizer, inputs, labels
            )
        _restore(net, optimizer, device, initial)
        train_step.scaler = torch.amp.GradScaler(device.type, enabled=scaler.is_enabled())
        hooks.end("warmup", samples=warmup_steps * cfg.batch_size)
        if cfg.budget_s is not None:  # a window of about budget_s at the steady step time
            budget = timed_budget(cfg.budget_s, step_times, budget, dist)
    warmup_samples = warmup_steps * cfg.batch_size
    t_now = time.perf_counter()
    phases["warmup"], t_phase = t_now - t_phase, t_now

    classes = dataset.num_classes
    # Evaluation runs at the training step's per-rank shape (a short last batch padded): the
    # kernels cuDNN's autotuning chose for the training step serve it, so no new shape is tuned
    # (a larger evaluation batch cost up to 10 s of autotuning per run on an H200).
    eval_batch = max(1, per_rank_batch)
    epoch_eval_size = min(cfg.epoch_eval_samples, test_size)

    def evaluate(start: int, stop: int) -> tuple[float, float]:
        """Accuracy and macro F1 on test images ``[start, stop)``, sharded over the ranks
        (each scores a contiguous shard; the confusion counts are summed)."""
        eval_model.eval()
        confusion = torch.zeros(classes * classes, dtype=torch.int64, device=device)
        size = stop - start
        lo = start + dist.rank * size // world
        hi = start + (dist.rank + 1) * size // world
        with torch.no_grad(), autocast():
            for inputs, labels in data.test_batches(eval_batch, start=lo, stop=hi, pad=True):
                predicted = eval_model(inputs)[: labels.shape[0]].argmax(dim=1)
                confusion += torch.bincount(labels * classes + predicted, minlength=classes**2)
        confusion = _all_reduce_sum(confusion, dist).view(classes, classes).cpu()
        return macro_scores(confusion)

    # ---- The budget ----------------------------------------------------------------------------
    hooks.begin("budget")
    budget_start = time.perf_counter()
    phases["budget_open"] = budget_start - t_phase  # the hooks' own start-up (CodeCarbon's)
    per_epoch: list[EpochStats] = []
    step = 0
    mark_every = max(1, budget.steps // MARKS_PER_BUDGET) if on_mark is not None else 0
    if on_mark is not None:
        on_mark(0, budget.samples)
    train_model.train()
    for epoch in range(1, budget.epochs + 1):
        hooks.begin("epoch", epoch=epoch)
        epoch_start = time.perf_counter()
        steps_here = budget.steps_in_epoch(epoch)
        plan = plan_epoch(
            data.train_size,
            cfg.batch_size,
            seed=cfg.run_seed,
            epoch=epoch,
            world_size=world,
            rank=dist.rank,
            steps=steps_here,
        )
        batches = data.prepare(plan)  # the epoch's gather indices, on the device
        loss_sum = torch.zeros((), device=device)
        for i in range(steps_here):
            inputs, labels = data.train_batch(batches, i)
            loss_sum += train_step(inputs, labels, recipe_lr_at(step, budget.steps, recipe))
            step += 1
            if on_mark is not None and mark_every and step % mark_every == 0:  # host-side: no sync
                on_mark(step * cfg.batch_size, budget.samples)
        # The epoch's only host-device sync: the loss, summed over the ranks, read once.
        train_loss = _all_reduce_sum(loss_sum, dist).item() / (steps_here * world)
        samples = steps_here * cfg.batch_size
        duration_s = time.perf_counter() - epoch_start
        hooks.end("epoch", epoch=epoch, samples=samples)
        eval_accuracy = None
        if epoch_eval_size > 0:  # accuracy on a fixed subset, for energy-to-accuracy
            hooks.begin("epoch_eval", epoch=epoch)
            eval_accuracy, _ = evaluate(0, epoch_eval_size)
            hooks.end("epoch_eval", epoch=epoch, samples=epoch_eval_size)
            train_model.train()
        stats = EpochStats(epoch, samples, train_loss, duration_s, eval_accuracy)
        per_epoch.append(stats)
        if on_epoch is not None:
            on_epoch(stats)
    budget_end = time.perf_counter()
    budget_duration_s = budget_end - budget_start
    hooks.end("budget", samples=budget.samples)
    t_phase = time.perf_counter()
    phases["budget"] = budget_duration_s
    phases["budget_close"] = t_phase - budget_end  # the hooks' own shut-down (CodeCarbon's)

    # ---- Evaluation: each rank scores a contiguous shard, the counts are summed --------------
    hooks.begin("eval")
    if dist.distributed:
        for buffer in net.buffers():  # BatchNorm running statistics: rank 0's everywhere
            tdist.broadcast(buffer, src=0)
    accuracy, f1_macro = evaluate(0, test_size)
    hooks.end("eval", samples=test_size)
    eval_end = time.perf_counter()
    phases["eval"] = eval_end - t_phase

    hooks.end("run", samples=warmup_samples + budget.samples)
    return TrainResult(
        samples=budget.samples,
        steps=budget.steps,
        epochs_completed=budget.steps / budget.steps_per_epoch,
        warmup_samples=warmup_samples,
        train_loss=per_epoch[-1].train_loss,
        accuracy=accuracy,
        f1_macro=f1_macro,
        per_epoch=per_epoch,
        params=params,
        world_size=world,
        test_samples=test_size,
        train_size=data.train_size,
        steps_per_epoch=budget.steps_per_epoch,
        duration_s=budget_duration_s,
        warmup_steps=warmup_steps,
        phases=phases,
        eval_end_perf_s=eval_end,
    )


class _GraphedForwardBackward:
    """One step's forward and backward pass, captured once as a CUDA graph and replayed.

    As in PyTorch's whole-network capture recipe: a few iterations on a side stream first (lazy
    initialisation must not happen during capture), gradients set to None before the capture,
    so the captured backward *assigns* the gradients (in the graph's memory pool) and every
    replay rewrites the same tensors: no zeroing between steps. The autocast weight cache is
    off inside the capture (its cached copies would be freed under the graph). The caller's
    snapshot/restore undoes what these iterations did to weights and BatchNorm statistics.
    """

    SIDE_STREAM_ITERATIONS = 3

    def __init__(
        self,
        model: nn.Module,
        criterion: nn.Module,
        autocast: Autocast,
        optimizer: torch.optim.Optimizer,
        inputs: torch.Tensor,
        labels: torch.Tensor,
    ) -> None:
        self.inputs = inputs.clone()
        self.labels = labels.clone()
        device = inputs.device
        optimizer.zero_grad(set_to_none=True)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(self.SIDE_STREAM_ITERATIONS):
                with autocast():
                    loss = criterion(model(self.inputs), self.labels)
                loss.backward()
                optimizer.zero_grad(set_to_none=True)
                del loss  # a live loss keeps its autograd nodes (and their stream) alive
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            with autocast():
                self.loss = criterion(model(self.inputs), self.labels)
            self.loss.backward()
        # the gradients the graph writes (its memory pool): an eager step in between (the
        # probe's next candidate) frees .grad, and ``rebind_grads`` points it back here
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.grads = [p.grad for p in self.params]

    def rebind_grads(self) -> None:
        """Point every parameter's ``.grad`` at the tensor the graph writes (after eager steps
        of the same model freed them)."""
        for param, grad in zip(self.params, self.grads, strict=True):
            param.grad = grad

    def replay(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Run the captured pass on this batch; returns the loss tensor the graph writes."""
        self.inputs.copy_(inputs)
        self.labels.copy_(labels)
        self.graph.replay()
        return self.loss


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_budget(
    budget_s: float, step_times: list[float], budget: Budget, dist: DistContext
) -> Budget:
    """The steps that take about ``budget_s`` at the warm-up's steady step time (the median of
    its last WARMUP_STEADY_STEPS steps, rank 0's, so every rank runs the same number)."""
    last = sorted(step_times[-WARMUP_STEADY_STEPS:])
    step_s = last[len(last) // 2] if last else 0.0
    steps = max(1, round(budget_s / step_s)) if step_s > 0 else 1
    if dist.distributed:
        agreed = torch.tensor([steps], device=dist.device)
        tdist.broadcast(agreed, src=0)
        steps = int(agreed.item())
    return Budget(steps=steps, steps_per_epoch=budget.steps_per_epoch, batch_size=budget.batch_size)


def steady(step_times: list[float]) -> bool:
    """True once the last WARMUP_STEADY_STEPS step times agree within WARMUP_STEADY_SPREAD
    (and at least WARMUP_MIN_STEPS steps ran): the one-off costs (cuDNN autotuning, lazy
    initialisation, compilation) are behind us."""
    if len(step_times) < max(WARMUP_MIN_STEPS, WARMUP_STEADY_STEPS):
        return False
    last = step_times[-WARMUP_STEADY_STEPS:]
    return min(last) > 0 and max(last) / min(last) - 1.0 <= WARMUP_STEADY_SPREAD


def _steady(step_times: list[float], dist: DistContext) -> bool:
    """``steady`` on rank 0, decided for every rank (they must run the same number of steps)."""
    verdict = steady(step_times)
    if not dist.distributed:
        return verdict
    flag = torch.tensor([1 if verdict else 0], device=dist.device)
    tdist.broadcast(flag, src=0)
    return bool(flag.item())


@dataclass
class _Snapshot:
    model: dict[str, torch.Tensor]
    optimizer: dict
    cpu_rng: torch.Tensor
    cuda_rng: torch.Tensor | None


def _snapshot(net: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> _Snapshot:
    """Copies of everything the warm-up changes: weights, BatchNorm statistics, optimizer state
    (momentum buffers) and the random generators (dropout)."""
    return _Snapshot(
        model={k: v.detach().clone() for k, v in net.state_dict().items()},
        optimizer=copy.deepcopy(optimizer.state_dict()),
        cpu_rng=torch.get_rng_state(),
        cuda_rng=torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    )


def _restore(
    net: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, snap: _Snapshot
) -> None:
    """Copy the snapshot back in place (compiled graphs and DDP keep pointing at the same
    tensors); an empty optimizer state drops the momentum buffers, as before the first step."""
    net.load_state_dict(snap.model)
    optimizer.load_state_dict(snap.optimizer)
    torch.set_rng_state(snap.cpu_rng)
    if snap.cuda_rng is not None:
        torch.cuda.set_rng_state(snap.cuda_rng, device)
