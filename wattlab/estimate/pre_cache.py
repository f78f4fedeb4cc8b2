"""A fitted PRE kept on disk, so that ``wattlab estimate`` fits once instead of on every call.

Where: ``$WATTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/wattlab``, else ``~/.cache/wattlab``; one
file ``pre-<key>.json`` per fitted model. The key (``fit_key``) hashes what shapes the fit: the
training data's bytes (the reference CSV as stored, or a database's runs as CSV), the fit's
options, the source of the modules that turn runs into features and fit them (so any change of
code invalidates it) and the versions of the libraries they use.

Format: plain JSON of coefficients and residuals, never pickle, so a file someone edited cannot
run code; it is read back only when its own key matches and every part has the expected shape.
The time and power regressors are kept as the numbers their prediction needs (physics
coefficients; ridge coefficients; kernel ridge's training matrix and dual coefficients; the
target scaler), so a cache hit loads neither scikit-learn nor scipy. Gradient boosting (not a
default candidate) is not kept: it is refitted.

Robustness: files are written to a new temporary file (random name, never through a link) in
the same folder and renamed into place (no half-written cache after a crash); a file that is
not the user's own, damaged (too deep, too large, a non-finite number), a FIFO or a device is
not read: it is refitted and replaced, and one line on stderr says why
(``wattlab.cache_files``). Pruning removes only fits this cache wrote (their name and header).
A folder that cannot be written means no cache, not an error.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from wattlab.estimate.pre import PreModel

CACHE_FORMAT = 5  # bump when the JSON layout changes (2: the roofline time model, issue 29;
# 3: its live-marks term, issue 38; 4: regimes, the leave-one-GPU-out residuals, issue 47;
# 5: activations counted as the elements every operator writes, launches as module calls
# + kernels, issue 47)
ENV_DIR = "WATTLAB_CACHE_DIR"
KEEP_FILES = 16  # older cached fits beyond this many are removed when a new one is written
MAX_FILE_BYTES = 64 * 2**20  # a larger file is not a fit of ours (the reference's is ~160 kB)
_NAME = re.compile(r"pre-([0-9a-f]{40})\.json")
# package files whose source shapes a fitted PRE (features, physics, fit, specs, model building)
CODE_FILES = (
    "estimate/pre.py",
    "estimate/roofline.py",
    "estimate/pre_distance.py",
    "estimate/pre_cache.py",
    "estimate/features.py",
    "estimate/run_shape.py",
    "estimate/families.py",
    "estimate/specs.py",
    "estimate/gpu_specs.csv",
    "train/models.py",
    "train/config.py",
)
LIBRARIES = ("numpy", "pandas", "scipy", "scikit-learn", "torch", "torchvision")


class CacheFormatError(ValueError):
    """A cached file that is not a PRE fit of ours with this key."""


def cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The cache folder: $WATTLAB_CACHE_DIR, $XDG_CACHE_HOME/wattlab or ~/.cache/wattlab; None
    for ``WATTLAB_CACHE_DIR=off`` (the rule every cache follows: ``cache_files.cache_folder``)."""
    from wattlab.cache_files import cache_folder

    return cache_folder(env)


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of the source that shapes a fit (``CODE_FILES``) and of ``LIBRARIES``' versions."""
    digest = hashlib.sha256(f"format {CACHE_FORMAT}\n".encode())
    root = resources.files("wattlab")
    for name in CODE_FILES:
        path = root.joinpath(*name.split("/"))
        try:
            content = path.read_bytes()
        except OSError:
            content = b"<missing>"
        digest.update(name.encode() + b"\n" + hashlib.sha256(content).digest())
    for library in LIBRARIES:
        try:
            version = metadata.version(library)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{library}=={version}\n".encode())
    return digest.hexdigest()


def fit_key(data: bytes, options: Mapping[str, Any] | None = None) -> str:
    """The cache key of a fit on ``data`` (the training data's bytes) with ``options``."""
    digest = hashlib.sha256(code_fingerprint().encode())
    digest.update(hashlib.sha256(data).digest())
    digest.update(json.dumps(dict(options or {}), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:40]


def frame_bytes(runs_df: pd.DataFrame) -> bytes:
    """A table's content as bytes for ``fit_key`` (its CSV, columns sorted)."""
    return runs_df.reindex(columns=sorted(map(str, runs_df.columns))).to_csv(index=False).encode()


# ---------------------------------------------------------------------------------------------
# Regressors as numbers


class PlainRegressor:
    """A fitted ridge or RBF kernel ridge with a standardised target, as numbers: what
    ``TransformedTargetRegressor(Ridge | KernelRidge(kernel="rbf"), StandardScaler())``
    predicts, without scikit-learn."""

    def __init__(
        self,
        kind: str,
        coef: np.ndarray,
        intercept: float,
        y_mean: float,
        y_scale: float,
        x_fit: np.ndarray | None = None,
        gamma: float | None = None,
    ) -> None:
        if kind not in ("ridge", "kernel_ridge"):
            raise CacheFormatError(f"unknown regressor {kind!r}")
        if kind == "kernel_ridge" and (x_fit is None or gamma is None):
            raise CacheFormatError("a kernel ridge needs its training matrix and gamma")
        self.kind = kind
        self.coef = coef
        self.intercept = intercept
        self.y_mean = y_mean
        self.y_scale = y_scale
        self.x_fit = x_fit
        self.gamma = gamma

    @classmethod
    def from_sklearn(cls, fitted: Any) -> PlainRegressor | None:
        """The numbers of a fitted TransformedTargetRegressor; None for other regressors."""
        regressor = getattr(fitted, "regressor_", None)
        scaler = getattr(fitted, "transformer_", None)
        if regressor is None or scaler is None or not hasattr(scaler, "scale_"):
            return None
        y_mean = float(np.ravel(scaler.mean_)[0])
        y_scale = float(np.ravel(scaler.scale_)[0])
        name = type(regressor).__name__
        if name == "Ridge":
            return cls(
                "ridge",
                np.ravel(regressor.coef_).astype(float),
                float(np.ravel(regressor.intercept_)[0]),
                y_mean,
                y_scale,
            )
        if name == "KernelRidge" and regressor.kernel == "rbf" and regressor.gamma is not None:
            return cls(
                "kernel_ridge",
                np.ravel(regressor.dual_coef_).astype(float),
                0.0,
                y_mean,
                y_scale,
                np.asarray(regressor.X_fit_, dtype=float),
                float(regressor.gamma),
            )
        return None

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self.kind == "ridge":
            scaled = x @ self.coef + self.intercept
        else:
            assert self.x_fit is not None and self.gamma is not None
            distance = (
                (x**2).sum(axis=1)[:, None]
                - 2 * x @ self.x_fit.T
                + (self.x_fit**2).sum(axis=1)[None, :]
            )
            scaled = np.exp(-self.gamma * np.clip(distance, 0, None)) @ self.coef
        return scaled * self.y_scale + self.y_mean

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "y_mean": self.y_mean,
            "y_scale": self.y_scale,
            "x_fit": None if self.x_fit is None else self.x_fit.tolist(),
            "gamma": self.gamma,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlainRegressor:
        x_fit = None if doc["x_fit"] is None else _matrix(doc["x_fit"])
        coef = _vector(doc["coef"])
        if x_fit is not None and x_fit.shape[0] != coef.size:
            raise CacheFormatError("kernel ridge: training rows and coefficients differ")
        gamma = None if doc["gamma"] is None else _number(doc["gamma"])
        return cls(
            str(doc["kind"]),
            coef,
            _number(doc["intercept"]),
            _number(doc["y_mean"]),
            _number(doc["y_scale"]),
            x_fit,
            gamma,
        )


def _number(value: Any) -> float:
    """A finite number (a NaN or infinite coefficient is damage, never a prediction)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CacheFormatError(f"expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise CacheFormatError("a number too large") from None
    if not math.isfinite(number):
        raise CacheFormatError("a number that is not finite")
    return number


def _whole(value: Any, high: int = 2**32 - 1) -> int:
    """A whole number from 0 to ``high`` (a seed, a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise CacheFormatError(f"expected a whole number from 0 to {high}")
    return value


def _vector(value: Any) -> np.ndarray:
    if not isinstance(value, list):
        raise CacheFormatError("expected a list of numbers")
    return np.array([_number(v) for v in value], dtype=float)


def _matrix(value: Any) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise CacheFormatError("expected a list of rows")
    rows = [_vector(row) for row in value]
    if len({row.size for row in rows}) != 1:
        raise CacheFormatError("rows of different lengths")
    return np.vstack(rows)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CacheFormatError("expected a list of strings")
    return tuple(value)


def _physics_json(fit: Any) -> dict[str, Any]:
    return {
        "kind": "physics",
        "intercept": bool(fit.intercept),
        "precisions": list(fit.precisions),
        "pooled": fit.pooled.coef.tolist(),
        "split": fit.split.coef.tolist(),
    }


def _physics_from(doc: Mapping[str, Any]) -> Any:
    from wattlab.estimate.pre import _Physics, _PhysicsFit

    intercept = doc["intercept"]
    if not isinstance(intercept, bool):
        raise CacheFormatError("physics intercept must be true or false")
    fit = _PhysicsFit(intercept=intercept)
    fit.precisions = _strings(doc["precisions"])
    offset = 1 if intercept else 0
    fit.pooled = _Physics(intercept=intercept)
    fit.pooled.coef = _vector(doc["pooled"])
    fit.split = _Physics(intercept=intercept)
    fit.split.coef = _vector(doc["split"])
    if fit.pooled.coef.size != offset + 3 or fit.split.coef.size != offset + 1 + 2 * len(
        fit.precisions
    ):
        raise CacheFormatError("physics coefficients of the wrong length")
    return fit


def _regressor_json(model: Any) -> dict[str, Any] | None:
    from wattlab.estimate.pre import _PhysicsFit
    from wattlab.estimate.roofline import Roofline

    if isinstance(model, Roofline):
        return model.to_json()
    if isinstance(model, _PhysicsFit):
        return _physics_json(model)
    plain = model if isinstance(model, PlainRegressor) else PlainRegressor.from_sklearn(model)
    return None if plain is None else plain.to_json()


def _roofline_from(doc: Mapping[str, Any]) -> Any:
    from wattlab.estimate.roofline import Roofline

    if doc.get("kind") != "roofline":
        raise CacheFormatError("expected the roofline time model")
    try:
        return Roofline.from_json(dict(doc))
    except ValueError as error:
        raise CacheFormatError(str(error)) from None


def _regressor_from(doc: Mapping[str, Any]) -> Any:
    if doc["kind"] == "roofline":
        return _roofline_from(doc)
    if doc["kind"] == "physics":
        return _physics_from(doc)
    return PlainRegressor.from_json(doc)


# ---------------------------------------------------------------------------------------------
# PreModel <-> JSON


def to_json(model: PreModel) -> dict[str, Any] | None:
    """A fitted PRE as JSON-ready numbers; None when a part cannot be kept (gradient boosting)."""
    from wattlab.estimate.pre import _Seen

    chain = model.chain
    assert chain is not None and chain.design is not None and model.seen is not None
    assert chain.time is not None and chain.power is not None and model.physics_time is not None
    time_model = _regressor_json(chain.time.model)
    power_model = _regressor_json(chain.power.model)
    physics = _regressor_json(model.physics_time.model)
    assert model.physics_power is not None
    physics_power = _regressor_json(model.physics_power.model)
    if time_model is None or power_model is None or physics is None or physics_power is None:
        return None
    design = chain.design
    fitted = {
        name: {
            "family": part.family,
            "params": part.params,
            "cv_mae_log": part.cv_mae_log,
            "residual_low": part.residual_low,
            "residual_high": part.residual_high,
        }
        for name, part in (("time", model.time), ("power", model.power), ("energy", model.energy))
    }
    return {
        "format": CACHE_FORMAT,
        "n_runs": model.n_runs,
        "n_configs": model.n_configs,
        "interval": model.interval,
        "selection_groups": model.selection_groups,
        "fitted": fitted,
        "cv_table": [
            {**row, "params": dict(row["params"])} for row in model.cv_table.to_dict("records")
        ],
        "excluded": [[_plain(k), v] for k, v in model.excluded.items()],
        "chain": {
            "time_family": [chain.time_family[0], chain.time_family[1]],
            "power_family": [chain.power_family[0], chain.power_family[1]],
            "seed": chain.seed,
            "medians": chain.medians,
            "design": {
                "precisions": list(design.precisions),
                "mean": design.mean.tolist(),
                "scale": design.scale.tolist(),
                "fraction_mean": design.fraction_mean.tolist(),
                "fraction_scale": design.fraction_scale.tolist(),
            },
            "time": time_model,
            "power": power_model,
        },
        "physics_time": physics,
        "physics_power": physics_power,
        "residuals": {
            protocol: {target: values.tolist() for target, values in parts.items()}
            for protocol, parts in model.residuals.items()
        },
        "seen": {f.name: _plain(getattr(model.seen, f.name)) for f in fields(_Seen)},
        "coverage": None if model.coverage is None else model.coverage.to_json(),
        "widening": {target: w.to_json() for target, w in model.widening.items()},
    }


def _plain(value: Any) -> Any:
    """Tuples as lists, numpy scalars as Python numbers, for JSON."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not kept in the cache")


def _tupled(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tupled(v) for v in value)
    return value


def _seen_from(doc: dict[str, Any], seen_class: Any) -> Any:
    """The ``_Seen`` of a document, each field checked for its type."""

    def pairs(value: Any, kind: Callable[[Any], Any]) -> tuple:
        if not isinstance(value, list) or not all(
            isinstance(v, list) and len(v) == 2 for v in value
        ):
            raise CacheFormatError("expected a list of pairs")
        return tuple((kind(a), kind(b)) for a, b in value)

    def text(value: Any) -> str:
        if not isinstance(value, str):
            raise CacheFormatError("expected a string")
        return value

    numbers = lambda value: tuple(float(v) for v in _vector(value))  # noqa: E731
    return seen_class(
        models=_strings(doc["models"]),
        costs=pairs(doc["costs"], _number),
        precisions=_strings(doc["precisions"]),
        batch_sizes=numbers(doc["batch_sizes"]),
        gpu_counts=numbers(doc["gpu_counts"]),
        gpu_names=_strings(doc["gpu_names"]),
        reference_gpu=text(doc["reference_gpu"]),
        limit_fractions=numbers(doc["limit_fractions"]),
        model_precisions=pairs(doc["model_precisions"], text),
        families=_strings(doc["families"]),
        marks_per_step=numbers(doc["marks_per_step"]),
        transfer_distance=_number(doc["transfer_distance"]),
    )


def from_json(doc: Mapping[str, Any]) -> PreModel:
    """The PreModel of ``to_json``'s output; CacheFormatError (or KeyError, TypeError,
    ValueError) when the document is not one."""
    import pandas as pd

    from wattlab.estimate.pre import (
        LOG_INPUTS,
        TIME_TERMS,
        PreModel,
        _Chain,
        _Design,
        _Fitted,
        _PowerModel,
        _Seen,
        _TimeModel,
    )

    if doc.get("format") != CACHE_FORMAT:
        raise CacheFormatError("another cache format")
    c = doc["chain"]
    d = c["design"]
    design = _Design(
        precisions=_strings(d["precisions"]),
        mean=_vector(d["mean"]),
        scale=_vector(d["scale"]),
        fraction_mean=_vector(d["fraction_mean"]),
        fraction_scale=_vector(d["fraction_scale"]),
    )
    if design.mean.size != len(LOG_INPUTS) or design.scale.size != len(LOG_INPUTS):
        raise CacheFormatError("design of the wrong width")
    if design.fraction_mean.size != len(TIME_TERMS) or design.fraction_scale.size != len(
        TIME_TERMS
    ):
        raise CacheFormatError("fractions of the wrong width")
    medians = {str(k): _number(v) for k, v in dict(c["medians"]).items()}
    time_family = (str(c["time_family"][0]), dict(c["time_family"][1]))
    power_family = (str(c["power_family"][0]), dict(c["power_family"][1]))
    seed = _whole(c["seed"])
    chain = _Chain(time_family, power_family, seed, medians)
    chain.design = design
    chain.time = _TimeModel(time_family[0], time_family[1], seed, _regressor_from(c["time"]))
    chain.power = _PowerModel(power_family[0], power_family[1], seed, _regressor_from(c["power"]))
    if (time_family[0] == "physics") != (c["time"]["kind"] == "roofline") or (
        power_family[0] == "physics"
    ) != (c["power"]["kind"] == "physics"):
        raise CacheFormatError("regressor kinds do not match their families")
    physics = _TimeModel("physics", {"fit": "relative"}, seed, _roofline_from(doc["physics_time"]))
    if doc["physics_power"].get("kind") != "physics":
        raise CacheFormatError("the physics power model is not one")
    physics_power = _PowerModel(
        "physics", {"fit": "relative"}, seed, _physics_from(doc["physics_power"])
    )
    residuals = {
        str(protocol): {str(target): _vector(values) for target, values in parts.items()}
        for protocol, parts in dict(doc["residuals"]).items()
    }
    if "configuration" not in residuals:
        raise CacheFormatError("no configuration residuals")
    seen = _seen_from(dict(doc["seen"]), _Seen)
    parts = {}
    for name, pipeline in (("time", chain.time), ("power", chain.power), ("energy", chain)):
        f = doc["fitted"][name]
        parts[name] = _Fitted(
            str(f["family"]),
            dict(f["params"]),
            pipeline,
            _number(f["cv_mae_log"]),
            _number(f["residual_low"]),
            _number(f["residual_high"]),
        )
    interval = _number(doc["interval"])
    if not 0 < interval < 1 or not all(math.isfinite(v) for v in design.mean):
        raise CacheFormatError("interval or design out of range")
    from wattlab.estimate.pre_distance import Coverage, Widening

    try:
        coverage = None if doc["coverage"] is None else Coverage.from_json(dict(doc["coverage"]))
        widening = {str(k): Widening.from_json(dict(v)) for k, v in dict(doc["widening"]).items()}
    except ValueError as error:
        raise CacheFormatError(str(error)) from None
    if widening and set(widening) != {"energy", "time"}:
        raise CacheFormatError("widening of other targets than energy and time")
    return PreModel(
        time=parts["time"],
        power=parts["power"],
        energy=parts["energy"],
        coverage=coverage,
        widening=widening,
        n_runs=_whole(doc["n_runs"]),
        n_configs=_whole(doc["n_configs"]),
        interval=interval,
        cv_table=pd.DataFrame(list(doc["cv_table"])),
        excluded={_tupled(k): str(v) for k, v in doc["excluded"]},
        chain=chain,
        physics_time=physics,
        physics_power=physics_power,
        residuals=residuals,
        seen=seen,
        selection_groups=str(doc["selection_groups"]),
    )


# ---------------------------------------------------------------------------------------------
# The folder


def _path(directory: Path, key: str) -> Path:
    return directory / f"pre-{key}.json"


def _resolved(directory: Path | None) -> Path | None:
    """``directory``, else ``cache_dir()``; None when there is no home to put it in."""
    if directory is not None:
        return directory
    try:
        return cache_dir()
    except (RuntimeError, KeyError):
        return None


def _read(path: Path, key: str) -> tuple[PreModel | None, str | None]:
    """The fit in ``path`` with this key, or None and why it was not used (None: no file)."""
    import wattlab.cache_files as cache_files

    try:
        data = cache_files.read_entry(path, MAX_FILE_BYTES)
    except cache_files.Untrusted as error:
        return None, str(error)
    if data is None:
        return None, None
    try:
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None, "it holds another fit"
        return from_json(doc["model"]), None
    except RecursionError:
        return None, "it is nested too deeply to be a fit"
    except CacheFormatError as error:
        return None, f"it is damaged ({error})"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError):
        return None, "it is damaged (not a fit of this form)"


def load(key: str, directory: Path | None = None) -> PreModel | None:
    """The cached fit with this key, or None (absent, unreadable, corrupt, not ours or not
    this user's own: see ``wattlab.cache_files``)."""
    folder = _resolved(directory)
    if folder is None:
        return None
    return _read(_path(folder, key), key)[0]


def save(model: PreModel, key: str, directory: Path | None = None) -> Path | None:
    """Write the fit atomically (a new temporary file, never through a link, then a rename;
    writable by its owner only); the path, or None when it cannot be kept (a regressor not
    kept as numbers, a folder that cannot be written or is a link)."""
    import wattlab.cache_files as cache_files

    folder = _resolved(directory)
    doc = to_json(model)
    if doc is None or folder is None:
        return None
    try:
        text = json.dumps({"key": key, "model": doc}, default=_json_default)
    except (TypeError, ValueError):
        return None
    data = text.encode("utf-8")
    path = cache_files.write_entry(_path(folder, key), lambda handle: handle.write(data))
    if path is not None:
        _prune(folder, keep=path)
    return path


def _own_fit(path: Path) -> bool:
    """Whether ``path`` is a fit this cache wrote: its name (``pre-<40 hex>.json``), a regular
    file of this user's, and the header ``save`` writes, naming the same key."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        return False
    import wattlab.cache_files as cache_files

    header = f'{{"key": "{match.group(1)}", "model": {{"format": '.encode()
    return cache_files.head_of(path, len(header)) == header


def _prune(directory: Path, keep: Path) -> None:
    """Remove all but the KEEP_FILES newest fits this cache wrote (never ``keep``, never a
    file it did not write: see ``_own_fit``)."""
    try:
        cached = sorted(
            (p for p in directory.glob("pre-*.json") if _own_fit(p)),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in cached[KEEP_FILES:]:
            if old != keep:
                old.unlink()
    except OSError:
        pass


# A first fit on the shipped reference (313 runs of two GPUs): the cold-cache estimate less the
# warm-cache one, 15.1 s - 3.8 s, on 2 idle cores, each model profiled plain and under autocast
# (docs/measured/cpu-estimate-speed-idle-2026-12-06b.txt). Slower on a loaded machine.
FIRST_FIT_S = 11
FIRST_FIT_RUNS = 313


def say_fitting(runs: int, cached: bool) -> None:
    """The line a fit that is not cached yet prints first, on stderr (a fit is a silent wait)."""
    then = "cached afterwards" if cached else "not cached"
    print(
        f"wattlab: fitting PRE on {runs} runs (~{FIRST_FIT_S} s on 2 idle cores for the "
        f"{FIRST_FIT_RUNS} shipped ones, longer on a busy machine; {then})",
        file=sys.stderr,
        flush=True,
    )


def fit_cached(
    data: bytes,
    runs: Callable[[], pd.DataFrame],
    *,
    directory: Path | None = None,
    use_cache: bool = True,
    on_fit: Callable[[int, bool], None] | None = say_fitting,
    **options: Any,
) -> tuple[PreModel | None, str]:
    """PRE fitted on ``runs()`` (called only on a miss), kept under ``fit_key(data, options)``.

    ``data``: the bytes the runs come from (the CSV file, or ``frame_bytes`` of a table).
    ``options``: ``fit_pre``'s keywords. ``on_fit(number of runs, use_cache)`` is called before a
    fit (default: one line on stderr). Returns the model and how it was got: "cached",
    "fitted and cached" or "fitted (not cached)"; or None and the reason when PRE cannot be
    fitted on these runs (too few configurations ...). Errors of ``runs()`` pass through.
    """
    from wattlab.errors import DataError
    from wattlab.estimate.pre import fit_pre

    key = fit_key(data, options)
    folder = _resolved(directory)
    if use_cache and folder is not None:
        path = _path(folder, key)
        model, why = _read(path, key)
        if model is not None:
            return model, "cached"
        if why is not None:
            from wattlab.cache_files import note

            note(path, why, "PRE is fitted again")
    table = runs()
    if on_fit is not None:
        from wattlab.cache_files import can_write_in

        on_fit(len(table), use_cache and folder is not None and can_write_in(folder))
    try:
        model = fit_pre(table, **options)
    except DataError as error:
        return None, str(error)
    if use_cache and save(model, key, directory) is not None:
        return model, "fitted and cached"
    return model, "fitted (not cached)"


def fit_reference(
    path: str | Path | None = None,
    *,
    directory: Path | None = None,
    use_cache: bool = True,
    on_fit: Callable[[int, bool], None] | None = say_fitting,
    **options: Any,
) -> tuple[PreModel | None, str]:
    """``fit_cached`` on a reference CSV (default: the shipped ones, every GPU's), keyed by the
    files' bytes, so a hit neither parses the CSV nor fits. DataError when the file is missing,
    unreadable or (on a miss) malformed."""
    from wattlab.estimate.reference import (
        default_reference_bytes,
        default_reference_path,
        load_default_reference,
        load_reference_csv,
    )

    if path is None:
        if not default_reference_path().is_file():
            load_default_reference()  # raises its DataError: not shipped yet
        return fit_cached(
            default_reference_bytes(),
            lambda: load_default_reference()[0],
            directory=directory,
            use_cache=use_cache,
            on_fit=on_fit,
            **options,
        )
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError:
        load_reference_csv(source)  # raises its DataError (missing, unreadable)
        raise
    return fit_cached(
        data,
        lambda: load_reference_csv(source)[0],
        directory=directory,
        use_cache=use_cache,
        on_fit=on_fit,
        **options,
    )


def fit_runs(
    runs_df: pd.DataFrame,
    *,
    directory: Path | None = None,
    use_cache: bool = True,
    on_fit: Callable[[int, bool], None] | None = say_fitting,
    **options: Any,
) -> tuple[PreModel | None, str]:
    """``fit_cached`` on a runs table (a database's), keyed by its content."""
    return fit_cached(
        frame_bytes(runs_df),
        lambda: runs_df,
        directory=directory,
        use_cache=use_cache,
        on_fit=on_fit,
        **options,
    )


__all__ = [
    "CACHE_FORMAT",
    "ENV_DIR",
    "CacheFormatError",
    "PlainRegressor",
    "cache_dir",
    "code_fingerprint",
    "fit_cached",
    "fit_key",
    "fit_reference",
    "fit_runs",
    "frame_bytes",
    "from_json",
    "load",
    "save",
    "say_fitting",
    "to_json",
]
