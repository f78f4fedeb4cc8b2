"""Features known before training starts, for PRE and the FLOPs baseline.

A configuration becomes one row: model cost (forward GFLOPs per sample, parameters, activation
memory per sample at the run's precision, layer count), workload (image size, batch size,
train-set size, epochs, samples), precision, GPU (count, TDP, peak rate at the precision, memory
bandwidth, memory, CUDA cores from ``gpu_specs.csv``) and the power limit in force.

Model cost comes from the module itself: ``wattlab.train.models.profile_model`` runs one
forward pass on the CPU (FlopCounterMode for FLOPs and attention, hooks on the leaf modules for
activations and layers), on any model wattlab can build: a torchvision classification name or a
factory ``FILE.py:FUNC`` / ``module:FUNC``. ``wattlab.train.models`` is imported only when
needed (so torch loads only when a model has to be built) and each model is profiled once per
(model, stem, image size, classes) in a process. Runs that already recorded
``model_gflops_per_sample`` and ``params`` use those. A model that cannot be built any more (a
factory file that is gone) gets NaN for the counted features, which PRE fills with the training
runs' medians and says so.

The model features and their units: ``gflops_per_sample`` (forward GFLOP per image, a
multiply-add counts 2), ``params`` (count), ``activation_mb_per_sample`` (MB of leaf-module
outputs per image at the run's precision), ``layers`` (leaf modules), ``tokens_per_image``
(the longest sequence an attention op sees; 0 for CNNs) and ``attention_gflops_per_sample``
(forward GFLOP per image of the attention products QK^T and attention x V, inside
``gflops_per_sample``).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from wattlab.errors import ConfigError, WattlabError
from wattlab.estimate.run_shape import recorded_marks_per_step
from wattlab.estimate.specs import GpuSpec, lookup_gpu, peak_flops
from wattlab.extras import MissingExtraError, missing_sentence
from wattlab.train.config import PRECISIONS
from wattlab.train.factory_ref import is_factory

NUMERIC_FEATURES = (
    "gflops_per_sample",  # forward pass, GFLOP per image
    "params",  # trainable parameters
    "activation_mb_per_sample",  # leaf-module outputs of one forward pass, MB at the precision
    "layers",  # leaf modules: the Python module calls of a step
    "kernels",  # operators of a forward pass that write (under autocast at AMP): launches
    "tokens_per_image",  # longest sequence an attention op sees (0 for CNNs)
    "attention_gflops_per_sample",  # forward GFLOP per image in QK^T and attention x V
    "image_size",  # pixels per side
    "batch_size",  # global batch
    "train_size",  # images in the training set
    "epochs",  # epochs in the budget
    "gpus",  # GPU count
    "gpu_tdp_w",  # default (maximum) power limit per GPU, W
    "gpu_peak_tflops",  # dense peak rate at the run's precision, TFLOP/s per GPU
    "gpu_memory_gb",
    "gpu_memory_bandwidth_gbs",  # GB/s (NaN when the spec table has none)
    "gpu_cuda_cores",
    "power_limit_w",  # limit in force per GPU, W (the default limit when none was set)
    "power_limit_fraction",  # power_limit_w / gpu_tdp_w
    "recipe",  # the trainer's recipe (wattlab.train.recipe): 2, or 1 for runs made before it
    "marks_per_step",  # STEP's live step-level marks per optimizer step (run_shape; 0: none)
)
CATEGORICAL_FEATURES = ("precision",)
FEATURES = NUMERIC_FEATURES + CATEGORICAL_FEATURES

REFERENCE_SOURCE = "from the shipped reference data, as torch is not installed"
CIFAR_TRAIN_SIZE = 50_000
DEFAULT_IMAGE_SIZE = 32
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "amp-bf16": 2, "amp-fp16": 2}


@dataclass(frozen=True)
class ModelCost:
    """A model's size. Units: FLOP per image for one forward pass; parameter count; elements
    its operators write in one forward pass per image; leaf-module count; writing operators
    (kernels) of one forward pass, plain and under autocast; tokens per image and attention
    FLOP per image (None when not counted)."""

    forward_flops_per_sample: float
    params: int
    activation_elements_per_sample: float | None = None
    layers: int | None = None
    tokens_per_image: int | None = None
    attention_flops_per_sample: float | None = None
    kernels: int | None = None
    kernels_autocast: int | None = None
    source: str = "counted"  # or REFERENCE_SOURCE: read from the shipped reference data

    @property
    def gflops_per_sample(self) -> float:
        return self.forward_flops_per_sample / 1e9


@dataclass(frozen=True)
class ModelStructure:
    """Activation elements per image (forward pass, what its operators write), leaf modules,
    tokens per image, attention FLOP per image and writing operators, plain and under
    autocast (None when not counted)."""

    activation_elements_per_sample: float
    layers: int
    tokens_per_image: int | None = None
    attention_flops_per_sample: float | None = None
    kernels: int | None = None
    kernels_autocast: int | None = None


_COST_CACHE: dict[tuple[str, str, int, int], ModelCost] = {}
_STRUCTURE_CACHE: dict[tuple[str, str, int, int], ModelStructure | None] = {}


def clear_model_cost_cache() -> None:
    """Forget computed model costs (tests swap the model module)."""
    _COST_CACHE.clear()
    _STRUCTURE_CACHE.clear()


def _models_module(model: str = "", stem: str = "cifar", image_size: int = 32) -> Any:
    try:
        return importlib.import_module("wattlab.train.models")
    except ImportError as error:
        name = getattr(error, "name", None) or "torch"
        known = reference_models(stem, image_size)
        instead = (
            f"pick a model whose cost the shipped reference data holds at stem {stem!r} and "
            f"image size {image_size} ({', '.join(known)})"
            if known
            else "give --db or --data with runs of this model (their model_gflops_per_sample)"
        )
        raise MissingExtraError(
            missing_sentence(
                f"counting the cost of model {model!r}", name, "train", instead=instead
            )
        ) from None


def _reference_rows(stem: str, image_size: int) -> pd.DataFrame:
    """The shipped reference runs at ``stem`` and ``image_size`` with a forward cost and a
    parameter count (empty when the reference cannot be read)."""
    from wattlab.estimate.reference import load_default_reference

    try:
        runs, _ = load_default_reference()
    except (WattlabError, OSError):
        return pd.DataFrame()
    need = ("model", "stem", "image_size", "model_gflops_per_sample", "params")
    if any(c not in runs.columns for c in need):
        return pd.DataFrame()
    gflops = pd.to_numeric(runs["model_gflops_per_sample"], errors="coerce")
    params = pd.to_numeric(runs["params"], errors="coerce")
    size = pd.to_numeric(runs["image_size"], errors="coerce").fillna(DEFAULT_IMAGE_SIZE)
    keep = (gflops > 0) & (params > 0) & (runs["stem"].astype("object") == stem)
    return runs[keep & (size == int(image_size))]


def reference_models(stem: str = "cifar", image_size: int = DEFAULT_IMAGE_SIZE) -> list[str]:
    """The models whose forward cost the shipped reference data holds at this stem and size."""
    rows = _reference_rows(stem, image_size)
    return sorted({str(m) for m in rows["model"]}) if not rows.empty else []


def reference_cost(model: str, stem: str, image_size: int) -> ModelCost | None:
    """``model``'s forward FLOPs per image and parameters as the shipped reference data holds
    them (the median over its runs; counted by wattlab when they were measured); None when it
    holds none. Activations and layers are not stored there, so they stay unknown."""
    rows = _reference_rows(stem, image_size)
    if rows.empty:
        return None
    mine = rows[rows["model"].astype("object") == model]
    if mine.empty:
        return None
    gflops = float(pd.to_numeric(mine["model_gflops_per_sample"]).median())
    params = int(pd.to_numeric(mine["params"]).median())
    return ModelCost(forward_flops_per_sample=gflops * 1e9, params=params, source=REFERENCE_SOURCE)


def _build(models: Any, model: str, stem: str, image_size: int, num_classes: int) -> Any:
    try:
        return models.build_model(model, stem=stem, num_classes=num_classes, image_size=image_size)
    except WattlabError:
        raise
    except Exception as error:  # noqa: BLE001 - any build failure is the user's model name
        raise ConfigError(f"model {model!r} (stem {stem!r}) cannot be built: {error}.") from None


def _profile(models: Any, module: Any, model: str, image_size: int) -> Any:
    try:
        return models.profile_model(module, image_size=image_size)
    except WattlabError:
        raise
    except Exception as error:  # noqa: BLE001
        raise ConfigError(
            f"could not count the FLOPs of model {model!r} at image size {image_size}: {error}."
        ) from None


def model_structure(
    model: str, *, stem: str = "cifar", image_size: int = DEFAULT_IMAGE_SIZE, num_classes: int = 10
) -> ModelStructure | None:
    """Activation elements, layers, tokens and attention FLOPs of a model wattlab can build;
    None for a model it cannot build (see model_cost)."""
    key = (model, stem, int(image_size), int(num_classes))
    if key in _STRUCTURE_CACHE:
        return _STRUCTURE_CACHE[key]
    try:
        cost = model_cost(model, stem=stem, image_size=image_size, num_classes=num_classes)
    except WattlabError:
        structure = None
    else:
        structure = ModelStructure(
            cost.activation_elements_per_sample or 0.0,
            int(cost.layers or 0),
            cost.tokens_per_image,
            cost.attention_flops_per_sample,
            cost.kernels,
            cost.kernels_autocast,
        )
    _STRUCTURE_CACHE[key] = structure
    return structure


def model_cost(
    model: str, *, stem: str = "cifar", image_size: int = DEFAULT_IMAGE_SIZE, num_classes: int = 10
) -> ModelCost:
    """Forward FLOPs per image, parameters, activations, layers, tokens and attention FLOPs of
    model ``model`` (a torchvision name or a factory ref), counted from the module built on the
    CPU (``wattlab.train.models.profile_model``); cached per (model, stem, image_size,
    num_classes). A model that cannot be built is a ConfigError. Without torch, the cost the
    shipped reference data holds (:func:`reference_cost`: FLOPs and parameters, no activations
    or layers); a model it does not hold is a MissingExtraError that names the models it does.
    """
    key = (model, stem, int(image_size), int(num_classes))
    if key in _COST_CACHE:
        return _COST_CACHE[key]
    try:
        models = _models_module(model, stem, int(image_size))
    except MissingExtraError:  # without torch: the shipped reference data may hold its cost
        known = reference_cost(model, stem, int(image_size)) if num_classes == 10 else None
        if known is None:
            raise
        _COST_CACHE[key] = known
        return known
    module = _build(models, model, stem, int(image_size), int(num_classes))
    profile = _profile(models, module, model, int(image_size))
    flops = float(profile.forward_flops_per_sample)
    if not flops > 0:
        raise ConfigError(f"model {model!r} reported {flops} forward FLOPs per sample.")
    cost = ModelCost(
        forward_flops_per_sample=flops,
        params=int(models.count_parameters(module)),
        activation_elements_per_sample=float(profile.activation_elements_per_sample),
        layers=int(profile.layers),
        tokens_per_image=int(profile.tokens_per_image),
        attention_flops_per_sample=float(profile.attention_flops_per_sample),
        kernels=int(profile.kernels),
        kernels_autocast=int(profile.kernels_autocast),
    )
    _COST_CACHE[key] = cost
    return cost


def default_samples(epochs: float, train_size: int, batch_size: int) -> int:
    """Training samples in an epoch budget: epochs x full batches per epoch x batch size
    (the rule RunConfig documents; the last partial batch is dropped)."""
    return int(round(epochs * (train_size // batch_size) * batch_size))


def _positive(name: str, value: Any, *, whole: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not number > 0 or (whole and number != int(number)) or math.isinf(number):
        kind = "a positive whole number" if whole else "a positive number"
        raise ConfigError(f"{name} must be {kind}, got {value!r}.")
    return number


def gpu_row(
    spec: GpuSpec, precision: str, gpus: float, gpu_tdp_w: float | None, power_limit_w: float | None
) -> dict[str, float]:
    tdp_w = float(gpu_tdp_w) if gpu_tdp_w is not None else spec.tdp_w
    limit_w = float(power_limit_w) if power_limit_w is not None else tdp_w
    bandwidth = spec.memory_bandwidth_gbs
    return {
        "gpus": gpus,
        "gpu_tdp_w": tdp_w,
        "gpu_peak_tflops": peak_flops(spec, precision) / 1e12,
        "gpu_memory_gb": spec.memory_gb,
        "gpu_memory_bandwidth_gbs": math.nan if bandwidth is None else float(bandwidth),
        "gpu_cuda_cores": float(spec.cuda_cores),
        "power_limit_w": limit_w,
        "power_limit_fraction": limit_w / tdp_w,
    }


def _structure_row(
    model: str | None,
    stem: str,
    image_size: int,
    precision: str,
    cost: ModelCost | None = None,
) -> dict[str, float]:
    """Activation MB per image at ``precision``, layers, kernels (under autocast at an AMP
    precision), tokens per image and attention GFLOPs per image; NaN when they cannot be
    counted."""
    elements: float | None = None
    layers: float | None = None
    kernels: float | None = None
    tokens: float | None = None
    attention: float | None = None
    if cost is None or cost.layers is None:
        structure = (
            None if model is None else model_structure(model, stem=stem, image_size=image_size)
        )
        if structure is not None:
            cost = ModelCost(
                0.0,
                0,
                structure.activation_elements_per_sample,
                structure.layers,
                structure.tokens_per_image,
                structure.attention_flops_per_sample,
                structure.kernels,
                structure.kernels_autocast,
            )
    if cost is not None and cost.layers is not None:
        elements, layers = cost.activation_elements_per_sample, float(cost.layers)
        kernels = None if cost.kernels is None else float(cost.kernels)
        if precision.startswith("amp") and cost.kernels_autocast is not None:
            kernels = float(cost.kernels_autocast)
        tokens = None if cost.tokens_per_image is None else float(cost.tokens_per_image)
        attention = cost.attention_flops_per_sample
    return {
        "activation_mb_per_sample": (
            math.nan if elements is None else elements * BYTES_PER_ELEMENT[precision] / 1e6
        ),
        "layers": math.nan if layers is None else layers,
        "kernels": math.nan if kernels is None else kernels,
        "tokens_per_image": math.nan if tokens is None else tokens,
        "attention_gflops_per_sample": math.nan if attention is None else attention / 1e9,
    }


def config_features(
    *,
    model: str,
    gpus: int,
    precision: str,
    epochs: float,
    gpu_name: str,
    batch_size: int = 256,
    stem: str = "cifar",
    image_size: int = DEFAULT_IMAGE_SIZE,
    train_size: int = CIFAR_TRAIN_SIZE,
    power_limit_w: float | None = None,
    gpu_tdp_w: float | None = None,
    gflops_per_sample: float | None = None,
    params: int | None = None,
    samples: int | None = None,
    recipe: int = 2,
    marks_per_step: float = 0.0,
) -> pd.DataFrame:
    """One feature row (plus ``samples``) for a configuration that has not run (trained with
    ``recipe``, the trainer's default 2).

    ``samples`` defaults to epochs x (train_size // batch_size) x batch_size.
    ``marks_per_step``: STEP's live marks per step (``run_shape.planned_marks_per_step``); 0,
    ``wattlab run``'s default, makes none. Bad values raise
    ConfigError; an unknown GPU raises lookup_gpu's ConfigError.
    """
    epochs = _positive("epochs", epochs)
    gpu_count = _positive("gpus", gpus, whole=True)
    batch_size = int(_positive("batch_size", batch_size, whole=True))
    image_size = int(_positive("image_size", image_size, whole=True))
    train_size = int(_positive("train_size", train_size, whole=True))
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    if power_limit_w is not None:
        _positive("power_limit_w", power_limit_w)
    if gpu_tdp_w is not None:
        _positive("gpu_tdp_w", gpu_tdp_w)
    if batch_size > train_size:
        raise ConfigError(
            f"batch_size {batch_size} is larger than the training set ({train_size} images)."
        )
    spec = lookup_gpu(gpu_name)
    cost = None
    if gflops_per_sample is None or params is None:
        cost = model_cost(model, stem=stem, image_size=image_size)
        gflops_per_sample = (
            cost.gflops_per_sample if gflops_per_sample is None else gflops_per_sample
        )
        params = cost.params if params is None else params
    if samples is None:
        samples = default_samples(epochs, train_size, batch_size)
    row: dict[str, Any] = {
        "model": model,
        "gpu_name": spec.name,
        "gflops_per_sample": float(gflops_per_sample),
        "params": float(params),
        **_structure_row(model, stem, image_size, precision, cost),
        "image_size": float(image_size),
        "batch_size": float(batch_size),
        "train_size": float(train_size),
        "epochs": epochs,
        **gpu_row(spec, precision, gpu_count, gpu_tdp_w, power_limit_w),
        "recipe": float(recipe),
        "marks_per_step": float(marks_per_step),
        "precision": precision,
        "samples": float(samples),
    }
    return pd.DataFrame([row])


def _value(row: Mapping[str, Any], name: str) -> Any:
    value = row.get(name)
    if value is None:
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


def _run_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Features of one runs-table row; raises WattlabError with the reason it has none."""
    if _value(row, "device") == "cpu":
        raise ConfigError("a CPU run: the GPU-based methods do not apply")
    gpu_name = _value(row, "gpu_name")
    if gpu_name is None:
        raise ConfigError("the run recorded no gpu_name")
    spec = lookup_gpu(str(gpu_name))
    precision = _value(row, "precision")
    if precision not in PRECISIONS:
        raise ConfigError(
            f"the run's precision {precision!r} is not one of {', '.join(PRECISIONS)}"
        )
    model = _value(row, "model")
    stem = _value(row, "stem") or "cifar"
    image_size = _value(row, "image_size") or DEFAULT_IMAGE_SIZE
    batch_size = _value(row, "batch_size")
    epochs = _value(row, "epochs")
    samples = _value(row, "samples")
    gpus = _value(row, "gpus") or 1
    if batch_size is None or epochs is None or samples is None:
        raise ConfigError("the run lacks batch_size, epochs or samples")
    train_size = _value(row, "train_size")
    if train_size is None:
        train_size = float(samples) / float(epochs)
    gflops = _value(row, "model_gflops_per_sample")
    params = _value(row, "params")
    cost = None
    # a factory a stored run names is never imported from the database (its code would run):
    # its row keeps the FLOPs and parameters it recorded, and its structure is unknown
    stored_factory = model is not None and is_factory(str(model))
    if gflops is None or params is None:
        if model is None:
            raise ConfigError("the run recorded neither a model name nor its GFLOPs")
        if stored_factory:
            raise ConfigError(
                f"the run's model is the factory {model}, which is not imported from a "
                "database, and the run recorded no GFLOPs and parameters"
            )
        cost = model_cost(str(model), stem=str(stem), image_size=int(image_size))
        gflops = cost.gflops_per_sample if gflops is None else gflops
        params = cost.params if params is None else params
    return {
        "model": None if model is None else str(model),
        "gpu_name": spec.name,
        "gflops_per_sample": float(gflops),
        "params": float(params),
        **_structure_row(
            None if model is None or stored_factory else str(model),
            str(stem),
            int(image_size),
            str(precision),
            cost,
        ),
        "image_size": float(image_size),
        "batch_size": float(batch_size),
        "train_size": float(train_size),
        "epochs": float(epochs),
        **gpu_row(
            spec,
            str(precision),
            float(gpus),
            _value(row, "gpu_tdp_w"),
            _value(row, "power_limit_w"),
        ),
        "recipe": float(_value(row, "recipe") or 1),
        "marks_per_step": recorded_marks_per_step(
            _value(row, "step_marks_json"), float(samples), float(batch_size)
        ),
        "precision": str(precision),
        "samples": float(samples),
    }


def run_features(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Feature rows for a runs table, same index. Columns: FEATURES, ``samples`` and
    ``feature_error`` (None, or one sentence why the row has no features: a CPU run, an unknown
    GPU, a model that cannot be built, ...)."""
    rows = []
    for _, run in runs_df.iterrows():
        try:
            features = _run_row(run.to_dict())
            features["feature_error"] = None
        except WattlabError as error:
            features = {"feature_error": str(error).rstrip(".")}
        rows.append(features)
    columns = ["model", "gpu_name", *FEATURES, "samples", "feature_error"]
    table = pd.DataFrame(rows, index=runs_df.index).reindex(columns=columns)
    errors = table["feature_error"].astype(object)
    table["feature_error"] = errors.where(errors.notna(), None)
    return table
