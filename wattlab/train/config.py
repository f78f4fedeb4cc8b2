"""Validated run configuration. Plain values, checked once, hashed for resumable sweeps."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

import wattlab.step.schedule as schedule
from wattlab.errors import ConfigError

MODELS = (
    "resnet18",
    "resnet34",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "vgg16",
    "efficientnet_b0",
)
DATASETS = ("synthetic", "cifar10")
PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16")
STEMS = ("cifar", "imagenet")
NUM_CLASSES = {"synthetic": 10, "cifar10": 10}  # classes of each dataset
DEFAULT_IMAGE_SIZE = 32  # both datasets' own images are 32x32; other sizes are resized
# A torchvision constructor's name (checked against torchvision at pre-flight, which imports it).
_MODEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Every float field: each must be finite (nan and inf pass comparisons such as `lr <= 0`).
FLOAT_FIELDS = (
    "lr",
    "momentum",
    "weight_decay",
    "label_smoothing",
    "power_limit_w",
    "power_limit_fraction",
    "project_after_fraction",
    "budget_s",
)

# Fields that do not change what is measured, so they stay out of the config hash.
NOT_HASHED = (
    "data_dir",
    "codecarbon",
    "project_after_epochs",
    "project_after_fraction",
    "sweep",
    "repetition_seed",  # repetitions of one configuration differ in it, and keep one hash
)
# Fields added after sweeps were first stored: left out of the hash at these defaults, so the
# configurations of older sweeps keep their hashes and resume.
HASHED_UNLESS_DEFAULT = {
    "budget_s": None,
    "model_factory": None,
    "image_size": DEFAULT_IMAGE_SIZE,
    "seed_pinned": False,
    "cpu_threads": None,
}
# Fields whose default changed when they were added (the synthetic task and the training
# recipe, version 2 since issue 22): left out of the hash at the *old* behaviour (version 1),
# so a configuration stored before them keeps its hash when asked for with version 1, and the
# new defaults hash differently, as they measure something else. synthetic_version is also
# left out when the dataset is not synthetic (it changes nothing there).
SYNTHETIC_VERSIONS = (1, 2)
RECIPES = (1, 2)
HASHED_UNLESS_LEGACY = {"synthetic_version": 1, "recipe": 1, "epoch_eval_samples": 0}


class RunConfig(BaseModel):
    """One training run. ``batch_size`` is the global batch: per-GPU batch = batch_size / world.

    Exactly one of ``epochs`` / ``budget_samples`` / ``budget_s`` sets the budget; with
    ``epochs`` the budget is ``epochs x (train set size // batch_size) x batch_size`` samples;
    with ``budget_s`` it is the steps that take about that many seconds at the warm-up's steady
    step time (a measured window of a chosen length: ``advise --probe``).
    """

    # protected_namespaces=(): the field model_factory is ours; pydantic before 2.10 warns on
    # every field named model_* unless told (pyproject's floor is 2.5)
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    # a torchvision classification constructor, or (set from model_factory) a factory ref
    model: str = "resnet18"
    # FILE.py:FUNC or package.module:FUNC, called as FUNC(num_classes=N); becomes ``model``
    model_factory: str | None = None
    stem: Literal[STEMS] = "cifar"  # type: ignore[valid-type]
    image_size: int = DEFAULT_IMAGE_SIZE  # pixels per side the model sees
    dataset: Literal[DATASETS] = "synthetic"  # type: ignore[valid-type]
    # 2: shape + texture, overlapping classes, label noise (wattlab.train.synthetic_v2);
    # 1: one shape per class (every GPU run scored 1.000); see wattlab.train.data
    synthetic_version: Literal[SYNTHETIC_VERSIONS] = 2  # type: ignore[valid-type]
    # 2: per-family optimiser, batch-scaled learning rate, longer warm-up, gradient clipping
    # (wattlab.train.recipe); 1: SGD at ``lr`` as given, for every model
    recipe: Literal[RECIPES] = 2  # type: ignore[valid-type]
    # accuracy on the first N test images after every epoch (inside the budget, in its own
    # `epoch_eval` windows): energy-to-accuracy; 0 turns it off (as before issue 22)
    epoch_eval_samples: int = 1024
    data_dir: str | None = None
    train_samples: int | None = None  # use only the first N training images (quick runs)
    test_samples: int | None = None
    precision: Literal[PRECISIONS] = "fp32"  # type: ignore[valid-type]
    compile: bool = False
    cuda_graphs: bool = False  # replay each step's forward+backward as one CUDA graph
    epochs: int | None = None
    budget_samples: int | None = None
    budget_s: float | None = None  # seconds of training, sized from the warm-up's step time
    batch_size: int = 256
    # peak learning rate (SGD, nesterov): recipe 1 uses it as given for the global batch;
    # recipe 2 reads it as the rate at batch 256 and scales it (wattlab.train.recipe)
    lr: float = 0.2
    momentum: float = 0.9
    weight_decay: float = 5e-4
    label_smoothing: float = 0.1
    warmup_steps: int = 10  # measured and recorded, excluded from the budget's figures
    seed: int = 0  # the configuration's seed; a sweep's repetition r trains with seed + r
    # the seed this run trains with (None: ``seed``); set per repetition by a sweep's plan
    repetition_seed: int | None = None
    seed_pinned: bool = False  # the spec gave ``seed:``: every repetition trains with it
    device: Literal["cuda", "cpu"] = "cuda"
    gpus: int = 1  # processes on CUDA (one GPU each)
    nproc: int = 1  # processes on the CPU (gloo)
    # torch's intra-op threads per process on the CPU (None: torch's default, one per core).
    # Beside other work, fewer threads than cores avoid OpenMP's spinning at every barrier
    # (docs/engine.md "The demo": a step on 1 thread was 3.4-6.3x faster than on 2, beside 2 loops)
    cpu_threads: int | None = None
    power_limit_w: float | None = None  # per GPU
    power_limit_fraction: float | None = None  # of the default limit
    codecarbon: bool = False
    # STEP, live: project the total after K epochs (the epoch rule), or after a fraction
    # 0 < f < 1 of the budget's samples (the step-level rule); at most one of the two.
    # The deprecated ``project_after`` (epochs when >= 1, a fraction when < 1) maps to one.
    project_after_epochs: int | None = None
    project_after_fraction: float | None = None
    sweep: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_project_after(cls, data: Any) -> Any:
        if not isinstance(data, dict) or schedule.LEGACY not in data:
            return data
        data = dict(data)
        value = data.pop(schedule.LEGACY)
        if value is None:
            return data
        key, number = schedule.from_legacy(value)
        if data.get(schedule.EPOCHS) is not None or data.get(schedule.FRACTION) is not None:
            raise ConfigError(
                "project_after is the old spelling of project_after_epochs and "
                "project_after_fraction; give only one of them."
            )
        schedule.warn_legacy(value, stacklevel=6)
        data[key] = number
        return data

    @model_validator(mode="before")
    @classmethod
    def _factory_names_the_model(cls, data: Any) -> Any:
        """A factory run's ``model`` is its factory ref, so every record names it."""
        if not isinstance(data, dict) or data.get("model_factory") is None:
            return data
        factory = data["model_factory"]
        model = data.get("model")
        if model is not None and model != factory:
            raise ValueError(
                f"give model or model_factory, not both (got model {model!r} and "
                f"model_factory {factory!r})"
            )
        return {**data, "model": factory}

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.model_factory is not None:
            if ":" not in self.model_factory:
                raise ValueError(
                    f"model_factory must be FILE.py:FUNC or package.module:FUNC, got "
                    f"{self.model_factory!r}"
                )
        elif not _MODEL_NAME.fullmatch(self.model):
            raise ValueError(
                f"model must be a torchvision model name such as resnet50 (got {self.model!r}); "
                "give your own model with model_factory FILE.py:FUNC"
            )
        if self.image_size < 1:
            raise ValueError(f"image_size must be a positive whole number, got {self.image_size}")
        for name in FLOAT_FIELDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value}")
        budgets = [b for b in (self.epochs, self.budget_samples, self.budget_s) if b is not None]
        if len(budgets) != 1:
            if not budgets:
                raise ValueError("give a budget: --epochs N or --budget-samples N")
            raise ValueError("give one of --epochs, --budget-samples and budget_s, not several")
        if self.budget_s is not None:
            if self.budget_s <= 0:
                raise ValueError(f"budget_s must be positive, got {self.budget_s}")
            if self.warmup_steps < 3:
                raise ValueError(
                    "budget_s sizes the run from the warm-up's steady step time, so it needs "
                    f"warmup_steps >= 3, got {self.warmup_steps}"
                )
        if self.epochs is not None and self.epochs <= 0:
            raise ValueError(f"epochs must be a positive whole number, got {self.epochs}")
        if self.budget_samples is not None and self.budget_samples <= 0:
            raise ValueError(f"budget_samples must be positive, got {self.budget_samples}")
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        world = self.world_size
        if world <= 0:
            raise ValueError("gpus and nproc must be at least 1")
        if self.batch_size % world:
            raise ValueError(
                f"batch_size {self.batch_size} must divide evenly over {world} processes"
            )
        if self.cpu_threads is not None:
            if self.cpu_threads < 1:
                raise ValueError(f"cpu_threads must be at least 1, got {self.cpu_threads}")
            if self.device != "cpu":
                raise ValueError("--cpu-threads applies to --device cpu")
        if self.device == "cpu" and self.gpus != 1:
            raise ValueError("--gpus applies to --device cuda; use --nproc on the CPU")
        if self.device == "cuda" and self.nproc != 1:
            raise ValueError("--nproc applies to --device cpu; use --gpus on CUDA")
        if self.power_limit_w is not None and self.power_limit_fraction is not None:
            raise ValueError("give --power-limit or --power-limit-fraction, not both")
        if self.power_limit_w is not None and not self.power_limit_w > 0:
            raise ValueError(f"power_limit_w must be a positive number, got {self.power_limit_w}")
        if self.power_limit_fraction is not None and not 0 < self.power_limit_fraction <= 1:
            raise ValueError(
                f"power_limit_fraction must be in (0, 1], got {self.power_limit_fraction}"
            )
        if self.device == "cpu" and self.has_power_limit:
            raise ValueError("power limits apply to GPUs only; drop them with --device cpu")
        if self.dataset == "cifar10" and not self.data_dir:
            raise ValueError("--dataset cifar10 needs --data-dir DIR (the cifar-10-batches-py)")
        if self.project_after_epochs is not None and self.project_after_fraction is not None:
            raise ValueError("give --project-after-epochs or --project-after-fraction, not both")
        if self.project_after_epochs is not None and self.project_after_epochs < 1:
            raise ValueError(
                "project_after_epochs must be a whole number of epochs >= 1, got "
                f"{self.project_after_epochs}"
            )
        if self.project_after_fraction is not None and not 0 < self.project_after_fraction < 1:
            raise ValueError(
                "project_after_fraction must be a fraction of the budget in (0, 1), got "
                f"{self.project_after_fraction}"
            )
        if self.project_after_fraction is not None and self.world_size > 1:
            raise ValueError(
                "project_after_fraction (step-level STEP) needs a single process; give "
                "project_after_epochs for multi-process runs"
            )
        if self.epoch_eval_samples < 0:
            raise ValueError(
                f"epoch_eval_samples must be >= 0 (0: no per-epoch evaluation), got "
                f"{self.epoch_eval_samples}"
            )
        for name in ("train_samples", "test_samples"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.cuda_graphs:
            _check_cuda_graphs(self)
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        return self

    @property
    def world_size(self) -> int:
        return self.gpus if self.device == "cuda" else self.nproc

    @property
    def run_seed(self) -> int:
        """The seed this run trains with (weights, data order, augmentation)."""
        return self.seed if self.repetition_seed is None else self.repetition_seed

    @property
    def has_power_limit(self) -> bool:
        return self.power_limit_w is not None or self.power_limit_fraction is not None

    def config_hash(self) -> str:
        """A stable hash of everything that changes what is measured."""
        data = self.model_dump(exclude=set(NOT_HASHED))
        for name, default in {**HASHED_UNLESS_DEFAULT, **HASHED_UNLESS_LEGACY}.items():
            if data.get(name) == default:
                del data[name]
        if self.dataset != "synthetic":
            data.pop("synthetic_version", None)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        """A short human label: ``resnet50 2xGPU amp-bf16 250W``."""
        parts = [self.model]
        if self.device == "cuda":
            parts.append(f"{self.gpus}xGPU")
        else:
            parts.append(f"{self.nproc}xCPU")
            if self.cpu_threads is not None:
                parts.append(f"{self.cpu_threads}-thread")
        parts.append(self.precision)
        if self.power_limit_w is not None:
            parts.append(f"{self.power_limit_w:g}W")
        elif self.power_limit_fraction is not None:
            parts.append(f"{self.power_limit_fraction:g}xTDP")
        parts.append(f"bs{self.batch_size}")
        if self.image_size != DEFAULT_IMAGE_SIZE:
            parts.append(f"{self.image_size}px")
        return " ".join(parts)


def _check_cuda_graphs(cfg: RunConfig) -> None:
    """CUDA graphs replay a fixed sequence of kernels: one GPU, no compiler, no loss scaler."""
    if cfg.device != "cuda":
        raise ValueError("cuda_graphs needs --device cuda; drop --cuda-graphs on the CPU")
    if cfg.world_size != 1:
        raise ValueError(
            "cuda_graphs runs on one GPU only (DDP's all-reduce is not captured); use --gpus 1"
        )
    if cfg.compile:
        raise ValueError("give --cuda-graphs or --compile, not both")
    if cfg.precision == "amp-fp16":
        raise ValueError(
            "cuda_graphs does not support amp-fp16 (its loss scaler); use fp32, tf32 or amp-bf16"
        )


FULL_TRAIN_SIZE = {"synthetic": 50_000, "cifar10": 50_000}  # images in each training set


def train_set_size(cfg: RunConfig) -> int:
    """Images in the training set ``cfg`` uses, without loading it (for pre-flight checks)."""
    full = FULL_TRAIN_SIZE[cfg.dataset]
    return min(cfg.train_samples or full, full)


def budget_steps(cfg: RunConfig, train_size: int) -> tuple[int, int]:
    """(optimizer steps in the budget, steps per epoch); a ConfigError when the batch does not
    fit the training set or the budget is less than one batch."""
    per_epoch = train_size // cfg.batch_size
    if per_epoch == 0:
        raise ConfigError(
            f"batch_size {cfg.batch_size} is larger than the {train_size} training samples; "
            "use a smaller batch or more train_samples."
        )
    if cfg.epochs is not None:
        return cfg.epochs * per_epoch, per_epoch
    if cfg.budget_s is not None:  # provisional (one epoch), until the warm-up has timed a step
        return per_epoch, per_epoch
    steps = (cfg.budget_samples or 0) // cfg.batch_size
    if steps == 0:
        raise ConfigError(
            f"budget_samples {cfg.budget_samples} is less than one global batch of "
            f"{cfg.batch_size}; give at least {cfg.batch_size}."
        )
    return steps, per_epoch


def format_validation_error(error: ValidationError, prefix: str = "") -> str:
    """One sentence from pydantic's first error, naming the offending field path."""
    first = error.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()) if p != "__root__")
    msg = first.get("msg", "invalid value")
    msg = msg.removeprefix("Value error, ")
    where = f"{prefix}{loc}" if loc else prefix.rstrip(".")
    if first.get("type") == "extra_forbidden":
        return f"unknown setting {where!r}; check its spelling."
    if first.get("type") == "literal_error":
        return f"{where}: {msg} (got {first.get('input')!r})."
    return f"{where}: {msg}." if where else f"{msg}."


def make_run_config(**values: object) -> RunConfig:
    """Build a RunConfig, turning validation failures into one-sentence ConfigErrors."""
    clean = {k: v for k, v in values.items() if v is not None}
    try:
        return RunConfig.model_validate(clean)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from None
