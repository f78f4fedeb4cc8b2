"""PRE, Pre-training Regression-based Estimation: predict a budget before it runs.

Time and power are predicted separately and energy = power x time, as in the paper's power
estimator. Targets: time per training sample (s) and mean power as a fraction of the GPUs'
TDP (total measured power / (GPUs x TDP)).

Physics in the features. Per training sample, three nominal times (``physics_terms``):

- ``compute_s``  = 3 x forward FLOPs / (GPUs x peak rate at the precision)  (forward + backward)
- ``memory_s``   = 3 x activation bytes / (GPUs x memory bandwidth)  (write, read, gradient)
- ``launch_s``   = (layers + kernels) x LAUNCH_S_PER_LAYER / batch size  (the step's module
  calls and kernel launches, shared by the batch: what dominates small models at 32x32 on a
  big GPU)

Candidate model families (``FAMILIES``):

- ``physics``: time = a x launch_s + b x compute_s + c x memory_s and power fraction = p0 +
  p1 x compute_s/time + p2 x memory_s/time + p3 x launch_s/time, non-negative least squares on
  relative errors. Few parameters, so it extrapolates to new models the way a roofline does.
- ``ridge``, ``kernel_ridge`` (RBF), ``gradient_boosting``: on the logs of the physics terms and
  the raw features (standardised), precision one-hot; the power model also sees the three
  fractions of time. Targets in logs.

Model selection: a small seeded random search per family; the time model and then the power
model with the lowest grouped cross-validation error (mean |log(predicted / measured)|) win.
Folds are grouped by model name when the data has at least three models (so selection rewards
predicting models it has not seen), else by configuration; repetitions of one configuration
never sit on both sides of a split. In a fold the power model sees the fold's *predicted* time,
as it will at prediction time.

Honest intervals. Out-of-fold log residuals of energy and time are kept per protocol: leave
configurations out (GroupKFold), leave one model out, leave one architecture family out
(``families.model_family``), leave one precision out, leave one batch size out, and, with two
or more GPUs, leave one GPU out through the transfer below (``gpu``). Each held-out run keeps
its regime and its GPU. A prediction inside the data uses the configuration residuals; a model,
family, precision or batch size outside the reference set uses +- the largest of the matching
protocols' conformal |residual| quantiles and says so in its notes (``EXTRAPOLATING: ...``).
Every quantile is read on the held-out runs of the prediction's GPU and regime, else its GPU,
else its regime, the first with MIN_STRATUM runs (``_stratum``): the intervals are as wide as
the errors where the prediction lies, not one factor for all (issue 47). A family the data has
too few of to hold one out (one family) cannot be checked, and its interval is widened by
NO_PROTOCOL_WIDEN; FAMILY_WIDEN widens a new family's when fewer than FAMILY_EVIDENCE families
could be held out (their residuals weigh every held-out family equally). A GPU missing from the
reference data is predicted only through a stated transfer from the reference GPU nearest it in
specs (``gpu_spec_distance``): time scaled by the physics time ratio (peak rate, bandwidth;
launches unchanged), power by the TDP ratio; its interval grows in quadrature by the measured
leave-one-GPU-out error and by the part of the spec scaling no measured transfer spanned
(``unmeasured_share``; all of it with one GPU in the data). Quantiles use the conformal rank
ceil((n + 1) x level) so that few residuals give wider, not narrower, intervals.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.estimate.families import model_family
from wattlab.estimate.features import (
    CATEGORICAL_FEATURES,
    NUMERIC_FEATURES,
    config_features,
    gpu_row,
    run_features,
)
from wattlab.estimate.pre_distance import Coverage, Widening
from wattlab.estimate.roofline import MARK_S, REGIMES, STEP_S, Roofline
from wattlab.estimate.specs import GpuSpec, lookup_gpu, peak_flops
from wattlab.train.config import PRECISIONS

MIN_CONFIGS = 4
FAMILIES = ("physics", "ridge", "kernel_ridge")  # the default candidates
ALL_FAMILIES = (*FAMILIES, "gradient_boosting")  # trees: slower, and cannot extrapolate
LAUNCH_S_PER_LAYER = 15e-6  # nominal: ~3 dispatches per call per step (fwd, bwd) at ~5 us each
# a regime's own held-out residuals give its interval once it has this many (else every run's)
MIN_STRATUM = 20
NO_PROTOCOL_WIDEN = 2.0  # interval factor when no held-out protocol can check an extrapolation
FAMILY_WIDEN = 1.25  # interval factor for an architecture family outside the reference data,
# on top of the leave-one-family-out interval, when fewer than FAMILY_EVIDENCE families could be
# held out: a handful of held-out families is thin evidence
FAMILY_EVIDENCE = 6
TIME_TERMS = ("launch_s", "compute_s", "memory_s")
LOG_INPUTS = (
    *TIME_TERMS,
    "roofline_s",
    "gflops_per_sample",
    "params",
    "activation_mb_per_sample",
    "layers",
    "batch_size",
    "gpus",
    "gpu_tdp_w",
    "gpu_peak_tflops",
    "gpu_memory_bandwidth_gbs",
    "power_limit_fraction",
)
FRACTIONS = ("launch_fraction", "compute_fraction", "memory_fraction")
IMPUTED = ("activation_mb_per_sample", "layers", "kernels", "gpu_memory_bandwidth_gbs")
PROTOCOLS = ("configuration", "model", "family", "precision", "batch_size")
# the held-out protocols whose runs calibrate how the interval grows with the distance from the
# reference set (pre_distance): each moves runs outside the batch sizes or costs fitted on
DISTANCE_PROTOCOLS = ("batch_size", "model", "family")
_REGIME_WORDS = {
    "launch-bound": "the CPU launching the step's kernels sets the pace",
    "compute-bound": "the GPU's arithmetic sets the pace",
    "memory-bound": "the GPU's activation traffic sets the pace",
    "kernel-bound": "the GPU's per-kernel floor sets the pace",
}
_PROTOCOL_NAMES = {
    "configuration": "configurations held out",
    "model": "leave-one-model-out",
    "family": "leave-one-family-out",
    "precision": "leave-one-precision-out",
    "batch_size": "leave-one-batch-size-out",
}
_SEARCH_SPACE: dict[str, dict[str, list[Any]]] = {
    "physics": {"fit": ["relative"]},
    "ridge": {"alpha": [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]},
    "kernel_ridge": {"alpha": [1e-3, 1e-2, 1e-1, 1.0], "gamma": [0.01, 0.03, 0.1, 0.3, 1.0]},
    "gradient_boosting": {
        "n_estimators": [50, 100],
        "max_depth": [2, 3],
        "learning_rate": [0.05, 0.1],
    },
}


# ---------------------------------------------------------------------------------------------
# Features -> physics terms -> design matrices


def physics_terms(features: pd.DataFrame) -> pd.DataFrame:
    """The nominal per-sample times (s) of a feature table: launch_s, compute_s (the dense
    products), memory_s, attention_s (the attention products) and their sum roofline_s (see the
    module docstring and ``roofline``). NaN inputs give NaN terms."""
    gpus = features["gpus"].astype(float)
    peak = gpus * features["gpu_peak_tflops"].astype(float) * 1e12
    attention = _attention_gflops(features)
    compute_s = 3 * (features["gflops_per_sample"].astype(float) - attention) * 1e9 / peak
    attention_s = 3 * attention * 1e9 / peak
    memory_s = 3 * features["activation_mb_per_sample"].astype(float) * 1e6
    memory_s = memory_s / (gpus * features["gpu_memory_bandwidth_gbs"].astype(float) * 1e9)
    launch_s = _launches(features) * LAUNCH_S_PER_LAYER
    launch_s = launch_s / features["batch_size"].astype(float)
    out = pd.DataFrame(
        {"launch_s": launch_s, "compute_s": compute_s, "memory_s": memory_s}, index=features.index
    )
    out["roofline_s"] = out.sum(axis=1, skipna=False) + attention_s
    out["attention_s"] = attention_s
    return out


def _launches(features: pd.DataFrame) -> pd.Series:
    """A forward pass's module calls and kernel launches: leaf modules + writing operators.
    Each is a CPU cost of the step: a ViT's attention runs a dozen operators inside one module
    with children, and a module that returns its input launches nothing (issue 47)."""
    return features["layers"].astype(float) + features["kernels"].astype(float)


def _attention_gflops(features: pd.DataFrame) -> pd.Series:
    """Forward GFLOP per image of the attention products; 0 where not counted (a model that
    cannot be built any more: most are CNNs)."""
    if "attention_gflops_per_sample" not in features:
        return pd.Series(0.0, index=features.index)
    return features["attention_gflops_per_sample"].astype(float).fillna(0.0)


def _recipes(features: pd.DataFrame) -> np.ndarray:
    """Each row's training recipe: 1 for runs made before recipes existed (no value)."""
    if "recipe" not in features:
        return np.ones(len(features))
    return features["recipe"].astype(float).fillna(1.0).to_numpy()


def _marks_per_step(features: pd.DataFrame) -> np.ndarray:
    """Each row's live STEP marks per step (``run_shape``): 0 where not recorded."""
    if "marks_per_step" not in features:
        return np.zeros(len(features))
    return features["marks_per_step"].astype(float).fillna(0.0).to_numpy()


def _log(x: Any) -> np.ndarray:
    return np.log(np.clip(np.asarray(x, dtype=float), 1e-15, None))


@dataclass
class _Rows:
    """Feature rows as arrays: logs of LOG_INPUTS, the three TIME_TERMS (s), precision, and
    GPUs x TDP (W). Folds slice these instead of DataFrames."""

    logs: np.ndarray
    parts: np.ndarray
    precision: np.ndarray
    tdp_w: np.ndarray
    attention: np.ndarray  # attention_s per row
    recipe: np.ndarray  # the training recipe (1 or 2)
    step: np.ndarray  # step_s per row: roofline.STEP_S / batch size
    marks: np.ndarray  # mark_s per row: marks per step x roofline.MARK_S / batch size
    machine: np.ndarray  # the GPU's name: the machine whose CPU launched the kernels

    def take(self, index: np.ndarray) -> _Rows:
        return _Rows(
            self.logs[index],
            self.parts[index],
            self.precision[index],
            self.tdp_w[index],
            self.attention[index],
            self.recipe[index],
            self.step[index],
            self.marks[index],
            self.machine[index],
        )

    @property
    def roofline_parts(self) -> np.ndarray:
        """launch_s, compute_s, memory_s, attention_s, step_s, mark_s: what
        ``roofline.Roofline`` reads."""
        return np.column_stack([self.parts, self.attention, self.step, self.marks])

    def __len__(self) -> int:
        return len(self.precision)


def medians_of(table: pd.DataFrame) -> dict[str, float]:
    """Training medians of the features that may be missing (1.0 when all are)."""
    medians = {}
    for column in IMPUTED:
        values = table[column].astype(float)
        medians[column] = float(values.median()) if values.notna().any() else 1.0
    return medians


def make_rows(table: pd.DataFrame, medians: dict[str, float]) -> _Rows:
    """Impute ``table`` with ``medians``, add the physics terms and turn it into arrays."""
    filled = table.copy()
    for column, median in medians.items():
        filled[column] = filled[column].astype(float).fillna(median)
    terms = pd.concat([filled, physics_terms(filled)], axis=1)
    return _Rows(
        logs=_log(terms[list(LOG_INPUTS)].to_numpy(dtype=float)),
        parts=terms[list(TIME_TERMS)].to_numpy(dtype=float),
        precision=terms["precision"].astype(str).to_numpy(),
        tdp_w=(terms["gpus"].astype(float) * terms["gpu_tdp_w"].astype(float)).to_numpy(),
        attention=terms["attention_s"].to_numpy(dtype=float),
        recipe=_recipes(terms),
        step=STEP_S / terms["batch_size"].to_numpy(dtype=float),
        marks=_marks_per_step(terms) * MARK_S / terms["batch_size"].to_numpy(dtype=float),
        machine=(
            terms["gpu_name"].astype(str).to_numpy()
            if "gpu_name" in terms
            else np.full(len(terms), "", dtype=object)
        ),
    )


@dataclass
class _Design:
    """Standardisation and precision categories learnt on training rows."""

    precisions: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    fraction_mean: np.ndarray
    fraction_scale: np.ndarray

    @classmethod
    def fit(cls, rows: _Rows, time_s: np.ndarray) -> _Design:
        fractions = rows.parts / np.asarray(time_s, dtype=float)[:, None]
        return cls(
            precisions=tuple(sorted(set(rows.precision))),
            mean=rows.logs.mean(axis=0),
            scale=_nonzero(rows.logs.std(axis=0)),
            fraction_mean=fractions.mean(axis=0),
            fraction_scale=_nonzero(fractions.std(axis=0)),
        )

    def matrix(self, rows: _Rows, time_s: np.ndarray | None = None) -> np.ndarray:
        logs = (rows.logs - self.mean) / self.scale
        onehot = rows.precision[:, None] == np.array(self.precisions, dtype=object)[None, :]
        recipe2 = (rows.recipe >= 2).astype(float)[:, None]
        blocks = [logs, onehot.astype(float), recipe2]
        if time_s is not None:
            fractions = rows.parts / np.asarray(time_s, dtype=float)[:, None]
            blocks.append((fractions - self.fraction_mean) / self.fraction_scale)
        return np.hstack(blocks)


def _nonzero(scale: np.ndarray) -> np.ndarray:
    return np.where(scale > 1e-12, scale, 1.0)


# ---------------------------------------------------------------------------------------------
# Regressors


class _Physics:
    """Non-negative least squares on relative errors: y ~ columns @ coef (linear space), with
    optional prior rows pulling coefficient j towards ``prior[j]`` with weight ``weight``."""

    def __init__(self, intercept: bool) -> None:
        self.intercept = intercept
        self.coef = np.zeros(0)

    def _columns(self, parts: np.ndarray) -> np.ndarray:
        if self.intercept:
            return np.hstack([np.ones((parts.shape[0], 1)), parts])
        return parts

    def fit(
        self,
        parts: np.ndarray,
        y: np.ndarray,
        prior: np.ndarray | None = None,
        weight: float = 0.0,
    ) -> _Physics:
        from scipy.optimize import nnls

        a = self._columns(parts) / y[:, None]
        b = np.ones_like(y)
        if prior is not None and weight > 0:
            scale = np.where(prior > 1e-12, prior, 1.0)
            rows = np.diag(weight / scale)
            a = np.vstack([a, rows])
            b = np.concatenate([b, np.where(prior > 1e-12, weight, 0.0)])
        self.coef, _ = nnls(a, b)
        return self

    def predict(self, parts: np.ndarray) -> np.ndarray:
        return np.clip(self._columns(parts) @ self.coef, 1e-15, None)


_SIBLING = {"amp-bf16": "amp-fp16", "amp-fp16": "amp-bf16"}  # same tensor-core rate and bytes
SHRINK = 0.01  # prior row weight: as strong as one run off by 1 %, pulling a per-precision
# coefficient towards the pooled one when the runs at that precision barely constrain it


class _PhysicsFit:
    """y = m x memory + a[precision] x launch + c[precision] x compute (+ an intercept) on the
    three TIME_TERMS columns. Launch and compute coefficients are per precision (autocast adds
    cast kernels; tensor cores reach a different share of their peak than FP32 units), each
    pulled towards the pooled fit's coefficient by a prior row of weight SHRINK, so that a
    precision whose runs say little about a term (only launch-bound models at amp-bf16, say)
    keeps the pooled value instead of an arbitrary one. A precision not seen uses its
    sibling's coefficients (amp-bf16 <-> amp-fp16) or, failing that, the pooled fit. The time
    model uses it on the terms; the power model (with an intercept, the idle share) on the
    terms as fractions of time."""

    def __init__(self, intercept: bool = False) -> None:
        self.intercept = intercept

    def fit(self, parts: np.ndarray, precision: np.ndarray, y: np.ndarray) -> _PhysicsFit:
        self.precisions = tuple(sorted(set(precision)))
        self.pooled = _Physics(intercept=self.intercept).fit(parts, y)
        pooled = self.pooled.coef
        offset = 1 if self.intercept else 0
        launch, compute, memory = pooled[offset : offset + 3]
        prior = [memory] + [launch, compute] * len(self.precisions)
        if self.intercept:
            prior = [pooled[0], *prior]
        split = self._split(parts, self._mapped(precision))
        self.split = _Physics(intercept=self.intercept).fit(split, y, np.array(prior), SHRINK)
        return self

    def _mapped(self, precision: np.ndarray) -> np.ndarray:
        out = []
        for p in precision:
            if p in self.precisions:
                out.append(p)
            elif _SIBLING.get(p) in self.precisions:
                out.append(_SIBLING[p])
            else:
                out.append(None)
        return np.array(out, dtype=object)

    def _split(self, parts: np.ndarray, mapped: np.ndarray) -> np.ndarray:
        launch, compute, memory = parts[:, 0], parts[:, 1], parts[:, 2]
        columns = [memory]
        for p in self.precisions:
            columns += [launch * (mapped == p), compute * (mapped == p)]
        return np.column_stack(columns)

    def predict(self, parts: np.ndarray, precision: np.ndarray) -> np.ndarray:
        mapped = self._mapped(precision)
        out = self.split.predict(self._split(parts, mapped))
        unseen = np.array([m is None for m in mapped], dtype=bool)
        if unseen.any():
            out[unseen] = self.pooled.predict(parts[unseen])
        return out


def _learned(family: str, params: dict[str, Any], seed: int) -> Any:
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    if family == "ridge":
        regressor: Any = Ridge(**params)
    elif family == "kernel_ridge":
        regressor = KernelRidge(kernel="rbf", **params)
    elif family == "gradient_boosting":
        regressor = GradientBoostingRegressor(random_state=seed, **params)
    else:
        raise ConfigError(
            f"PRE model family must be one of {', '.join(ALL_FAMILIES)}, got {family!r}."
        )
    return TransformedTargetRegressor(regressor=regressor, transformer=StandardScaler())


@dataclass
class _TimeModel:
    """Time per training sample (s)."""

    family: str
    params: dict[str, Any]
    seed: int = 0
    model: Any = None

    def fit(self, design: _Design, rows: _Rows, time_s: np.ndarray) -> _TimeModel:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny folds: ill-conditioned KRR solves
            if self.family == "physics":
                self.model = Roofline.fit(
                    rows.roofline_parts, rows.precision, rows.recipe, time_s, rows.machine
                )
            else:
                model = _learned(self.family, self.params, self.seed)
                self.model = model.fit(design.matrix(rows), _log(time_s))
        return self

    def predict(self, design: _Design, rows: _Rows) -> np.ndarray:
        if self.family == "physics":
            return self.model.predict(
                rows.roofline_parts, rows.precision, rows.recipe, rows.machine
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.exp(self.model.predict(design.matrix(rows)))

    def regime(self, rows: _Rows) -> list[str]:
        """Which term sets each row's pace (the physics model's reading, whatever the family)."""
        assert isinstance(self.model, Roofline)
        return self.model.regime(rows.roofline_parts, rows.precision, rows.recipe, rows.machine)


@dataclass
class _PowerModel:
    """Mean power as a fraction of GPUs x TDP, given the time per sample."""

    family: str
    params: dict[str, Any]
    seed: int = 0
    model: Any = None

    def fit(
        self, design: _Design, rows: _Rows, time_s: np.ndarray, fraction: np.ndarray
    ) -> _PowerModel:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.family == "physics":
                shares = rows.parts / np.asarray(time_s, dtype=float)[:, None]
                self.model = _PhysicsFit(intercept=True).fit(shares, rows.precision, fraction)
            else:
                model = _learned(self.family, self.params, self.seed)
                self.model = model.fit(design.matrix(rows, time_s), _log(fraction))
        return self

    def predict(self, design: _Design, rows: _Rows, time_s: np.ndarray) -> np.ndarray:
        if self.family == "physics":
            shares = rows.parts / np.asarray(time_s, dtype=float)[:, None]
            return self.model.predict(shares, rows.precision)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.exp(self.model.predict(design.matrix(rows, time_s)))


@dataclass
class _Chain:
    """A time model and a power model fitted on the same rows."""

    time_family: tuple[str, dict[str, Any]]
    power_family: tuple[str, dict[str, Any]]
    seed: int = 0
    medians: dict[str, float] = field(default_factory=dict)
    design: _Design | None = None
    time: _TimeModel | None = None
    power: _PowerModel | None = None

    def fit(self, rows: _Rows, time_s: np.ndarray, power_w: np.ndarray) -> _Chain:
        self.design = _Design.fit(rows, time_s)
        self.time = _TimeModel(*self.time_family, seed=self.seed).fit(self.design, rows, time_s)
        self.power = _PowerModel(*self.power_family, seed=self.seed).fit(
            self.design, rows, time_s, power_w / rows.tdp_w
        )
        return self

    def rows(self, table: pd.DataFrame) -> _Rows:
        return make_rows(table, self.medians)

    def predict(self, rows: _Rows) -> tuple[np.ndarray, np.ndarray]:
        """(time per sample s, mean power W)."""
        assert self.design is not None and self.time is not None and self.power is not None
        time_s = self.time.predict(self.design, rows)
        power_w = self.power.predict(self.design, rows, time_s) * rows.tdp_w
        return time_s, power_w


# ---------------------------------------------------------------------------------------------
# Fitted model and predictions


@dataclass
class _Fitted:
    """One chosen regressor with its grouped-CV error and (configuration) log residuals."""

    family: str
    params: dict[str, Any]
    pipeline: Any
    cv_mae_log: float  # mean |log(pred / actual)| out of fold
    residual_low: float  # log residual quantiles (actual - predicted)
    residual_high: float


@dataclass(frozen=True)
class PrePrediction:
    """PRE's prediction for one configuration. Units: J, s, W.

    ``interval_basis`` names the held-out protocol(s) whose residuals gave the interval;
    ``notes`` says what was extrapolated and how."""

    energy_j: float
    duration_s: float
    energy_low_j: float
    energy_high_j: float
    duration_low_s: float
    duration_high_s: float
    energy_per_sample_j: float
    time_per_sample_s: float
    samples: float
    power_w: float = math.nan
    interval_basis: str = "configuration"
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Seen:
    """What the training runs covered."""

    models: tuple[str, ...]
    costs: tuple[tuple[float, float], ...]  # (gflops, params) per model seen
    precisions: tuple[str, ...]
    batch_sizes: tuple[float, ...]
    gpu_counts: tuple[float, ...]
    gpu_names: tuple[str, ...]
    reference_gpu: str
    limit_fractions: tuple[float, ...]
    model_precisions: tuple[tuple[str, str], ...] = ()  # (model name, precision) pairs run
    families: tuple[str, ...] = ()  # architecture families (``families.model_family``)
    marks_per_step: tuple[float, ...] = ()  # live STEP marks per step, per run (run_shape)
    # how far apart the measured GPUs' specs lie (gpu_spec_distance; 0: one GPU)
    transfer_distance: float = 0.0


@dataclass
class PreModel:
    """Fitted PRE: a time model and a power model, their CV errors and residuals per protocol."""

    time: _Fitted
    power: _Fitted
    energy: _Fitted  # power x time: its out-of-fold error and residuals
    n_runs: int
    n_configs: int
    interval: float
    cv_table: pd.DataFrame = field(repr=False)
    excluded: dict[Any, str] = field(default_factory=dict, repr=False)  # run index -> reason
    chain: _Chain | None = field(default=None, repr=False)
    physics_time: _TimeModel | None = field(default=None, repr=False)  # for GPU transfer
    physics_power: _PowerModel | None = field(default=None, repr=False)  # an unseen precision
    residuals: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)
    seen: _Seen | None = field(default=None, repr=False)
    selection_groups: str = "configuration"
    # what the training rows span, and the interval's growth with the distance from it
    coverage: Coverage | None = field(default=None, repr=False)
    widening: dict[str, Widening] = field(default_factory=dict, repr=False)

    # -- intervals ------------------------------------------------------------------------
    def protocol_interval(self, protocol: str, target: str = "energy") -> tuple[float, float]:
        """(low, high) log factors from a protocol's out-of-fold residuals; KeyError if the
        protocol could not be run on the training data."""
        parts = self.residuals[protocol]
        return _quantiles(parts[target], self.interval, parts.get("weight"))

    def family_count(self) -> int:
        """How many architecture families the leave-one-family-out residuals held out."""
        return len(self.seen.families) if self.seen is not None else 0

    def _outside(self, row: pd.Series) -> list[tuple[str, str]]:
        """(protocol, sentence) for each way ``row`` lies outside the training runs."""
        seen = self.seen
        assert seen is not None
        out: list[tuple[str, str]] = []
        model = row.get("model")
        cost = (round(float(row["gflops_per_sample"]), 6), round(float(row["params"]), 0))
        if (model is None or model not in seen.models) and cost not in seen.costs:
            out.append(
                ("model", f"model {model!r} is not in the reference set ({', '.join(seen.models)})")
            )
            family = model_family(model)
            if seen.families and family not in seen.families:
                out.append(
                    (
                        "family",
                        f"the {family} family is not in the reference set "
                        f"({', '.join(seen.families)})",
                    )
                )
        pair = (str(model), str(row["precision"]))
        known = model is not None and row["precision"] in seen.precisions
        if not out and known and pair not in seen.model_precisions:
            out.append(
                ("precision", f"model {model!r} never ran at {pair[1]} in the reference set")
            )
        if row["precision"] not in seen.precisions:
            out.append(
                (
                    "precision",
                    f"precision {row['precision']} is not in the reference set "
                    f"({', '.join(seen.precisions)})",
                )
            )
        batch = float(row["batch_size"])
        if not min(seen.batch_sizes) <= batch <= max(seen.batch_sizes):
            out.append(
                (
                    "batch_size",
                    f"batch size {batch:g} lies outside the reference set's "
                    f"{min(seen.batch_sizes):g}-{max(seen.batch_sizes):g}",
                )
            )
        elif self.coverage is not None:
            name = None if model is None or pd.isna(model) else str(model)
            octaves, scope = self.coverage.batch_distance(name, batch)
            if octaves > 0:
                out.append(("batch_size", f"batch size {batch:g} lies outside {scope}"))
        if self.coverage is not None:
            _, reasons = self.coverage.feature_distance(row)
            out.extend(("features", reason) for reason in reasons)
        gpu = row.get("gpu_name")
        if gpu is not None and not pd.isna(gpu) and gpu not in seen.gpu_names:
            out.append(
                ("gpu", f"GPU {gpu} is not in the reference set ({', '.join(seen.gpu_names)})")
            )
        if float(row["gpus"]) not in seen.gpu_counts:
            counts = ", ".join(f"{g:g}" for g in seen.gpu_counts)
            out.append(
                ("gpus", f"{float(row['gpus']):g} GPUs is not in the reference set ({counts})")
            )
        fraction = round(float(row["power_limit_fraction"]), 3)
        if fraction not in seen.limit_fractions:
            out.append(
                (
                    "power_limit",
                    f"a power limit of {fraction:.0%} of TDP is not in the reference set "
                    "(see `wattlab estimate power-limits` for caps)",
                )
            )
        return out

    def _stratum(
        self, protocol: str, regime: str | None, machine: str | None = None
    ) -> tuple[np.ndarray | None, str]:
        """The held-out runs of ``protocol`` an interval reads (their mask and a phrase): those
        of the prediction's GPU and regime, else of its GPU, else of its regime, the first of
        these with at least MIN_STRATUM runs; else every one (None). A GPU's own runs come
        first: the reference GPUs' runs are not equally well predicted (the H100's, measured in
        short windows, err twice as much as the H200's)."""
        parts = self.residuals[protocol]
        regimes, machines = parts.get("regime"), parts.get("machine")
        names = self.seen.gpu_names if self.seen is not None else ()
        by_regime = (
            np.asarray(regimes) == REGIMES.index(regime)
            if regime is not None and regimes is not None and regime in REGIMES
            else None
        )
        by_machine = (
            np.asarray(machines) == names.index(machine)
            if machine is not None and machines is not None and machine in names and len(names) > 1
            else None
        )
        choices = []
        if by_machine is not None and by_regime is not None:
            choices.append((by_machine & by_regime, f"{regime} held-out runs on the {machine}"))
        if by_machine is not None:
            choices.append((by_machine, f"held-out runs on the {machine}"))
        if by_regime is not None:
            choices.append((by_regime, f"{regime} held-out runs"))
        for mask, words in choices:
            if int(mask.sum()) >= MIN_STRATUM:
                return mask, f"its {int(mask.sum())} {words}"
        return None, f"its {len(parts['energy'])} held-out runs"

    def protocol_half_width(
        self,
        protocol: str,
        target: str = "energy",
        regime: str | None = None,
        machine: str | None = None,
    ) -> float:
        """The conformal quantile of a protocol's |log residuals| at the interval's level (the
        stratum ``_stratum`` picks; family folds weighted equally)."""
        parts = self.residuals[protocol]
        mask, _ = self._stratum(protocol, regime, machine)
        values = np.abs(np.asarray(parts[target], dtype=float))
        weights = parts.get("weight")
        if mask is not None:
            values = values[mask]
            weights = None if weights is None else np.asarray(weights)[mask]
        return _abs_quantile(values, self.interval, weights)

    def _interval_for(
        self, outside: list[tuple[str, str]], regime: str | None = None, machine: str | None = None
    ) -> tuple[str, dict[str, tuple]]:
        """The interval basis and (energy, time) log-factor intervals for these reasons.

        Inside the data: the configuration residuals' quantiles (of the row's regime where it
        has MIN_STRATUM held-out runs). Outside: +-the largest of the matching protocols'
        conformal |residual| quantiles, each read on the regime's own held-out runs where there
        are enough (the direction in which other held-out groups erred says little about a new
        one); reasons no protocol can check widen it by NO_PROTOCOL_WIDEN."""
        bases = ["configuration"]
        unchecked: list[str] = []  # no held-out protocol in the data can check these
        for protocol, _ in outside:
            if protocol in ("features", "gpu"):  # the distance widening; the GPU transfer
                continue
            (bases if protocol in self.residuals else unchecked).append(protocol)
        bases = list(dict.fromkeys(bases))
        unchecked = list(dict.fromkeys(unchecked))
        checked = [o for o in outside if o[0] not in ("features", "gpu")]
        out = {}
        widest = bases[-1]
        for target in ("energy", "time"):
            if not checked:
                mask, _ = self._stratum("configuration", regime, machine)
                parts = self.residuals["configuration"]
                values = np.asarray(parts[target], dtype=float)
                low, high = _quantiles(values if mask is None else values[mask], self.interval)
            else:
                halves = {b: self.protocol_half_width(b, target, regime, machine) for b in bases}
                widest = max(halves, key=lambda b: halves[b]) if target == "energy" else widest
                low, high = -max(halves.values()), max(halves.values())
            if unchecked:
                low -= math.log(NO_PROTOCOL_WIDEN)
                high += math.log(NO_PROTOCOL_WIDEN)
            out[target] = (low, high)
        chosen = widest if checked else "configuration"
        _, phrase = self._stratum(chosen, regime, machine)
        basis = f"{_PROTOCOL_NAMES[chosen]} ({phrase})"
        if checked:
            others = [b for b in bases if b != chosen]
            basis += " (symmetric)"
            if others:
                basis += f"; the widest of it and {', '.join(_PROTOCOL_NAMES[b] for b in others)}"
        if "family" in bases:
            basis += " (families weighted equally)"
        if unchecked:
            names = ", ".join(u.replace("_", " ") for u in unchecked)
            basis += f", widened x{NO_PROTOCOL_WIDEN:g} for {names} (no held-out check possible)"
        return basis, out

    # -- predictions ----------------------------------------------------------------------
    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        """Predictions for feature rows (``config_features``/``run_features`` columns incl.
        ``samples``). Columns: energy_j, duration_s, energy_low_j, energy_high_j,
        duration_low_s, duration_high_s, energy_per_sample_j, time_per_sample_s, samples,
        power_w, interval_basis, notes."""
        missing = [
            c for c in (*NUMERIC_FEATURES, *CATEGORICAL_FEATURES, "samples") if c not in features
        ]
        if missing:
            raise DataError(f"PRE features lack the columns {', '.join(missing)}.")
        assert self.chain is not None and self.seen is not None
        rows = []
        for index, row in features.iterrows():
            rows.append(self._predict_row(row, index))
        return pd.DataFrame(rows, index=features.index)

    def _predict_row(self, row: pd.Series, index: Any) -> dict[str, Any]:
        assert self.chain is not None and self.seen is not None
        outside = self._outside(row)
        notes: list[str] = []
        gpu = row.get("gpu_name")
        transfer = gpu is not None and not pd.isna(gpu) and gpu not in self.seen.gpu_names
        table = row.to_frame().T.infer_objects()
        reference_gpu: GpuSpec | None = None
        ratios = (0.0, 0.0)
        if transfer:
            reference_gpu = self.nearest_reference_gpu(str(gpu), str(row["precision"]))
            time_ps, power_w, transfer_note = self._transfer(table, str(gpu), reference_gpu)
            notes.append(transfer_note)
            ratios = self._transfer_ratios(table, reference_gpu)
        else:
            time_ps, power_w, physics_note = self._predict_inside(table, str(row["precision"]))
            if physics_note:
                notes.append(physics_note)
        regime = None
        if self.physics_time is not None and isinstance(self.physics_time.model, Roofline):
            regime = self.physics_time.regime(self.chain.rows(table))[0]
        basis, bounds = self._interval_for(outside, regime, None if transfer else _gpu_of(row))
        if (
            any(protocol == "family" for protocol, _ in outside)
            and "family" in self.residuals
            and self.family_count() < FAMILY_EVIDENCE
        ):
            # as for a GPU transfer: a stated extra factor (unchecked families get x2 above)
            widen = math.log(FAMILY_WIDEN)
            bounds = {k: (lo - widen, hi + widen) for k, (lo, hi) in bounds.items()}
            basis += f", widened x{FAMILY_WIDEN:g} for a new family"
        distance = self.coverage.distance(row) if self.coverage is not None else 0.0
        if distance > 0 and self.widening:
            bounds = {
                k: (min(lo, -self.widening[k].half_width(distance)),
                    max(hi, self.widening[k].half_width(distance)))
                for k, (lo, hi) in bounds.items()
            }  # fmt: skip
            calibration = self.widening["energy"]
            basis += (
                f", widened with the distance from the reference set ({distance:.1f} octaves; "
                f"calibrated on {calibration.n} held-out runs, {calibration.n_outside} of them "
                "outside the runs their fold was fitted on)"
            )
        marks = self._marks_widening(table)
        if marks is not None:
            half, sentence = marks
            bounds = {k: (lo - half, hi + half) for k, (lo, hi) in bounds.items()}
            basis += f", widened x{math.exp(half):.2f} for the live marks' cost"
            outside = [*outside, ("marks", sentence)]
        if transfer:
            assert reference_gpu is not None
            bounds, words = self._transfer_bounds(
                bounds, str(gpu), reference_gpu, regime, str(row["precision"]), ratios
            )
            basis += words
        if outside:
            notes.insert(0, "EXTRAPOLATING: " + "; ".join(s for _, s in outside))
        if regime is not None:
            notes.append(f"regime: {regime} ({_REGIME_WORDS[regime]})")
        notes.append(f"interval from {basis}")
        samples = float(row["samples"])
        energy_ps = time_ps * power_w
        (e_lo, e_hi), (t_lo, t_hi) = bounds["energy"], bounds["time"]
        return {
            "energy_j": energy_ps * samples,
            "duration_s": time_ps * samples,
            "energy_low_j": energy_ps * samples * math.exp(e_lo),
            "energy_high_j": energy_ps * samples * math.exp(e_hi),
            "duration_low_s": time_ps * samples * math.exp(t_lo),
            "duration_high_s": time_ps * samples * math.exp(t_hi),
            "energy_per_sample_j": energy_ps,
            "time_per_sample_s": time_ps,
            "samples": samples,
            "power_w": power_w,
            "interval_basis": basis,
            "notes": "; ".join(notes),
        }

    # -- GPU transfer -----------------------------------------------------------------------
    def nearest_reference_gpu(self, gpu: str, precision: str) -> GpuSpec:
        """The reference GPU whose specs lie nearest ``gpu``'s (``gpu_spec_distance``)."""
        assert self.seen is not None
        target = lookup_gpu(gpu)
        names = self.seen.gpu_names or (self.seen.reference_gpu,)
        specs = [lookup_gpu(name) for name in names]
        return min(specs, key=lambda spec: gpu_spec_distance(target, spec, precision))

    def unmeasured_share(self, gpu: str, reference: GpuSpec, precision: str) -> float:
        """The share of the spec scaling from ``reference`` to ``gpu`` that no measured
        transfer spanned: 1 - (how far apart the measured GPUs' specs lie) / (how far ``gpu``'s
        lie from the reference's), at least 0; 1 with one GPU measured."""
        assert self.seen is not None
        distance = gpu_spec_distance(lookup_gpu(gpu), reference, precision)
        if distance <= 0:
            return 0.0
        return max(0.0, 1.0 - self.seen.transfer_distance / distance)

    def _transfer_bounds(
        self,
        bounds: dict[str, tuple[float, float]],
        gpu: str,
        reference: GpuSpec,
        regime: str | None,
        precision: str,
        ratios: tuple[float, float] = (0.0, 0.0),
    ) -> tuple[dict[str, tuple[float, float]], str]:
        """The interval of a prediction for a GPU outside the reference set, and its words.

        Each side grows in quadrature by (1) the measured transfer error, where two or more GPUs
        are in the reference set: the conformal |residual| quantile of predicting one measured
        GPU's runs from the others' through this transfer (the ``gpu`` protocol); and (2) the
        part of the spec scaling no measured transfer spanned (``unmeasured_share`` x the
        |log| of the time ratio, or of time x power for energy): an adjustment nobody could
        check counts as wholly uncertain; with one GPU measured, the whole scaling."""
        assert self.seen is not None
        share = self.unmeasured_share(gpu, reference, precision)
        time_half, energy_half = ratios
        measured = "gpu" in self.residuals
        out = {}
        for target, (lo, hi) in bounds.items():
            q = self.protocol_half_width("gpu", target, regime) if measured else 0.0
            extra = share * (energy_half if target == "energy" else time_half)
            out[target] = (-math.hypot(lo, q, extra), math.hypot(hi, q, extra))
        extra_words = (
            f"{share:.0%} of the spec scaling (time x{math.exp(time_half):.2f}; time and power "
            f"together x{math.exp(energy_half):.2f}) that no measured transfer spanned"
        )
        if not measured:
            return out, (
                f", grown in quadrature by {extra_words}: the reference set has one GPU, so no "
                "transfer error could be measured"
            )
        _, phrase = self._stratum("gpu", regime)
        q_energy = self.protocol_half_width("gpu", "energy", regime)
        return out, (
            f", grown in quadrature by the measured GPU-transfer error (leave-one-GPU-out over "
            f"{', '.join(self.seen.gpu_names)}, {phrase}: 90 % within x/{math.exp(q_energy):.2f})"
            f" and by {extra_words}"
        )

    def _marks_outside(self, table: pd.DataFrame) -> bool:
        """Whether the row's live marks per step lie outside the reference runs'."""
        seen = self.seen
        if seen is None or not seen.marks_per_step:
            return False
        marks = float(_marks_per_step(table)[0])
        return not min(seen.marks_per_step) - 1e-9 <= marks <= max(seen.marks_per_step) + 1e-9

    def _marks_widening(self, table: pd.DataFrame) -> tuple[float, str] | None:
        """(log half-width, sentence) when the row's live marks per step lie outside the
        reference runs': the marks' cost was fitted (``roofline`` mark_s), never seen absent,
        so the interval is widened each way by the whole cost the fit removed or added (the
        physics time with the most marks per step a reference run made against the row's)."""
        seen = self.seen
        assert seen is not None and self.chain is not None
        if not seen.marks_per_step or self.physics_time is None:
            return None
        if not isinstance(self.physics_time.model, Roofline):
            return None
        if not self._marks_outside(table):
            return None
        marks = float(_marks_per_step(table)[0])
        low, high = min(seen.marks_per_step), max(seen.marks_per_step)
        typical = max(seen.marks_per_step)
        as_seen = table.copy()
        as_seen["marks_per_step"] = typical
        assert self.chain.design is not None
        t_row = float(self.physics_time.predict(self.chain.design, self.chain.rows(table))[0])
        t_seen = float(self.physics_time.predict(self.chain.design, self.chain.rows(as_seen))[0])
        half = abs(math.log(t_seen / t_row)) if t_row > 0 and t_seen > 0 else 0.0
        sentence = (
            f"{marks:g} live STEP marks per step, the reference runs made {low:g}-{high:g} "
            "(their cost is fitted, not measured apart)"
        )
        return half, sentence

    def _predict_inside(self, table: pd.DataFrame, precision: str) -> tuple[float, float, str]:
        """(time per sample, power, note) from the chosen chain; for a precision no training
        run used, a learned (ridge, kernel ridge) time or power model is replaced by the
        physics one: a learned model has no column for a category it never saw, so its answer
        there is arbitrary (fp32 held out: a kernel-ridge power model was off by 42 %)."""
        assert self.chain is not None and self.seen is not None
        rows = self.chain.rows(table)
        time_ps, power_w = (float(v[0]) for v in self.chain.predict(rows))
        marks_outside = self._marks_outside(table)
        if precision in self.seen.precisions and not marks_outside:
            return time_ps, power_w, ""
        replaced = []
        assert self.chain.design is not None and self.chain.time is not None
        assert self.chain.power is not None
        if self.chain.time.family != "physics" and self.physics_time is not None:
            time_ps = float(self.physics_time.predict(self.chain.design, rows)[0])
            replaced.append("time")
        if precision in self.seen.precisions:  # only the marks: a learned power model is fine
            why = "the learned time model never saw a run without live STEP marks"
            return time_ps, power_w, f"time from the physics model: {why}" if replaced else ""
        if self.chain.power.family != "physics" and self.physics_power is not None:
            power_w = float(
                self.physics_power.predict(self.chain.design, rows, np.array([time_ps]))[0]
                * rows.tdp_w[0]
            )
            replaced.append("power")
        if not replaced:
            return time_ps, power_w, ""
        return (
            time_ps,
            power_w,
            f"{' and '.join(replaced)} from the physics model: precision {precision} has no "
            "training run, and a learned model cannot extrapolate to a category it never saw",
        )

    def _transfer_ratios(self, table: pd.DataFrame, reference: GpuSpec) -> tuple[float, float]:
        """|log| of the transfer's time ratio, and the Euclidean norm of the logs of its time and
        power ratios (the energy scaling's two uncertain parts)."""
        assert self.chain is not None and self.physics_time is not None
        _, _, time_ratio, power_ratio = transfer_chain(
            self.chain, self.physics_time, table, reference
        )
        t, p = float(time_ratio[0]), float(power_ratio[0])
        # energy's: the time and the power scaling, each uncertain on its own (their product
        # can be near 1 while both are far from it: an L4's time x8.9, power x0.10)
        return abs(math.log(t)), math.hypot(math.log(t), math.log(p))

    def _transfer(
        self, table: pd.DataFrame, gpu: str, reference: GpuSpec | None = None
    ) -> tuple[float, float, str]:
        """Predict on the reference GPU, then scale by spec ratios (see the module doc)."""
        assert self.chain is not None and self.seen is not None and self.physics_time is not None
        row = table.iloc[0]
        reference = reference or lookup_gpu(self.seen.reference_gpu)
        t_ref, p_ref, time_ratio, power_ratio = transfer_chain(
            self.chain, self.physics_time, table, reference
        )
        note = (
            f"TRANSFER: no reference run used a {gpu}; predicted for the {reference.name} (the "
            f"reference GPU nearest it in specs) and scaled by spec ratios (time "
            f"x{time_ratio[0]:.2f} from peak rate and memory bandwidth through the physics time "
            f"model, power x{power_ratio[0]:.2f} from TDP)"
        )
        del row
        return float(t_ref[0] * time_ratio[0]), float(p_ref[0] * power_ratio[0]), note

    def predict_one(self, features: pd.DataFrame) -> PrePrediction:
        """The prediction for a single feature row."""
        if len(features) != 1:
            raise DataError(f"predict_one takes one feature row, got {len(features)}.")
        row = self.predict(features).iloc[0]
        values: dict[str, Any] = {  # numbers, and two texts
            str(k): (str(v) if k in ("interval_basis", "notes") else float(v))
            for k, v in row.items()
        }
        return PrePrediction(**values)

    def predict_config(self, **config: Any) -> PrePrediction:
        """Predict a configuration that has not run; keywords as ``features.config_features``
        (model, gpus, precision, epochs, gpu_name, batch_size, stem, image_size, train_size,
        power_limit_w, gpu_tdp_w, ...)."""
        return self.predict_one(config_features(**config))

    def describe(self) -> str:
        """Which models won and how well they did out of fold, and what the data covers."""
        seen = self.seen
        assert seen is not None
        coverage = (
            f"{len(seen.models)} models, precisions {'/'.join(seen.precisions)}, batch sizes "
            f"{'/'.join(f'{b:g}' for b in seen.batch_sizes)}, GPUs {', '.join(seen.gpu_names)}"
        )
        return (
            f"time/sample: {_describe(self.time)}; power: {_describe(self.power)}; energy = "
            f"power x time, CV error {_mae_to_percent(self.energy.cv_mae_log):.1f} % "
            f"(folds grouped by {self.selection_groups}); {self.interval:.0%} interval from "
            f"held-out residuals; fitted on {self.n_runs} runs of {self.n_configs} "
            f"configurations ({coverage})"
        )


def _describe(fitted: _Fitted) -> str:
    params = ", ".join(f"{k}={v:g}" for k, v in sorted(fitted.params.items()) if k != "fit")
    settings = f" ({params})" if params else ""
    return f"{fitted.family}{settings}, CV error {_mae_to_percent(fitted.cv_mae_log):.1f} %"


def _gpu_of(row: pd.Series) -> str | None:
    """The spec name of a feature row's GPU (what the training rows' ``gpu_name`` hold)."""
    gpu = row.get("gpu_name")
    if gpu is None or pd.isna(gpu):
        return None
    try:
        return lookup_gpu(str(gpu)).name
    except ConfigError:
        return str(gpu)


def gpu_spec_distance(a: GpuSpec, b: GpuSpec, precision: str) -> float:
    """How far apart two GPUs' specs lie: the Euclidean norm of the logs of their ratios of
    memory bandwidth, peak rate at ``precision`` and TDP (0 for the same specs)."""
    parts = [
        math.log((a.memory_bandwidth_gbs or 1.0) / (b.memory_bandwidth_gbs or 1.0)),
        math.log(peak_flops(a, precision) / peak_flops(b, precision)),
        math.log(a.tdp_w / b.tdp_w),
    ]
    return math.sqrt(sum(p * p for p in parts))


def _as_gpu(table: pd.DataFrame, spec: GpuSpec) -> pd.DataFrame:
    """``table`` with each row's GPU columns those of ``spec`` at the row's precision, GPU count
    and power-limit fraction."""
    out = table.copy()
    for index, row in table.iterrows():
        limit_w = float(row["power_limit_fraction"]) * spec.tdp_w
        values = gpu_row(spec, str(row["precision"]), float(row["gpus"]), None, limit_w)
        for column, value in values.items():
            out.at[index, column] = value
    out["gpu_name"] = spec.name
    return out


def transfer_chain(
    chain: _Chain, physics_time: _TimeModel, table: pd.DataFrame, reference: GpuSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The transfer of feature rows to their own GPU from ``reference`` (module docstring):
    the chain's time and power on the reference GPU and the time and power ratios."""
    ref = _as_gpu(table, reference)
    ref_rows = chain.rows(ref)
    t_ref, p_ref = chain.predict(ref_rows)
    assert chain.design is not None
    phys_new = physics_time.predict(chain.design, chain.rows(table))
    phys_ref = physics_time.predict(chain.design, ref_rows)
    ok = (phys_ref > 0) & np.isfinite(phys_new)
    time_ratio = np.where(ok, phys_new / np.where(ok, phys_ref, 1.0), 1.0)
    power_ratio = table["gpu_tdp_w"].to_numpy(dtype=float) / reference.tdp_w
    return t_ref, p_ref, time_ratio, power_ratio


def _abs_quantile(values: np.ndarray, interval: float, weights: np.ndarray | None = None) -> float:
    """Conformal-rank quantile of absolute log residuals: the value at rank ceil((n + 1) x
    level) (weighted ranks when ``weights``); the largest when n is too small for that rank."""
    raw = np.asarray(values, dtype=float)
    n = raw.size
    if n == 0:
        return 0.0
    order = np.argsort(raw, kind="stable")
    ordered = raw[order]
    if weights is None:
        k = min(n, math.ceil((n + 1) * interval))
    else:
        w = np.asarray(weights, dtype=float)[order]
        ranks = np.cumsum(w * (n / w.sum()))
        k = min(n, int(np.searchsorted(ranks, (n + 1) * interval - 1e-9)) + 1)
    return max(0.0, float(ordered[k - 1]))


def _mae_to_percent(mae_log: float) -> float:
    return (math.exp(mae_log) - 1.0) * 100.0


def _quantiles(
    residuals: np.ndarray, interval: float, weights: np.ndarray | None = None
) -> tuple[float, float]:
    """Conformal-rank quantiles of log residuals (actual - predicted), always containing 0.

    ``weights`` (one per residual; rescaled to sum to n) weigh the ranks: with equal weights
    this is the plain rank ceil((n + 1) x level)."""
    raw = np.asarray(residuals, dtype=float)
    n = raw.size
    if n == 0:
        return 0.0, 0.0
    tail = (1.0 - interval) / 2.0
    order = np.argsort(raw, kind="stable")
    values = raw[order]
    if weights is None:
        k_high = min(n, math.ceil((n + 1) * (1.0 - tail)))
        k_low = max(1, math.floor((n + 1) * tail))
    else:
        w = np.asarray(weights, dtype=float)[order]
        ranks = np.cumsum(w * (n / w.sum()))  # equal weights: 1, 2, ..., n
        k_high = min(n, int(np.searchsorted(ranks, (n + 1) * (1.0 - tail) - 1e-9)) + 1)
        k_low = max(1, int(np.searchsorted(ranks, (n + 1) * tail + 1e-9, side="right")))
    return min(0.0, float(values[k_low - 1])), max(0.0, float(values[k_high - 1]))


# ---------------------------------------------------------------------------------------------
# Fitting


def _groups(runs: pd.DataFrame, features: pd.DataFrame) -> np.ndarray:
    if "config_hash" in runs and runs["config_hash"].notna().all():
        return runs["config_hash"].astype(str).to_numpy()
    keys = features[list(NUMERIC_FEATURES) + list(CATEGORICAL_FEATURES)].astype(str)
    return np.array(
        [hashlib.sha256("|".join(row).encode()).hexdigest()[:16] for row in keys.to_numpy()]
    )


def _model_keys(features: pd.DataFrame) -> np.ndarray:
    """A model's identity: its name, or its recorded cost when it has none."""
    names = features["model"] if "model" in features else pd.Series(None, index=features.index)
    costs = (
        features["gflops_per_sample"].round(6).astype(str) + "/" + features["params"].astype(str)
    )
    return np.where(names.notna(), names.astype(str), costs).astype(str)


def model_families(features: pd.DataFrame) -> np.ndarray:
    """Each row's architecture family (``families.model_family`` of its model name)."""
    names = features["model"] if "model" in features else pd.Series(None, index=features.index)
    return np.array([model_family(None if pd.isna(m) else m) for m in names], dtype=object)


def training_table(runs_df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[Any, str]]:
    """The usable runs (status ok, energy, duration and samples known, features buildable),
    their features, and the reason each other run was left out (by index)."""
    excluded: dict[Any, str] = {}
    needed = ("energy_total_j", "duration_s", "samples")
    for column in needed:
        if column not in runs_df:
            raise DataError(f"the runs table lacks the column {column!r} that PRE needs.")
    keep = []
    for index, run in runs_df.iterrows():
        status = run.get("status", "ok")
        if status != "ok":
            excluded[index] = f"status {status!r}"
        elif not all(pd.notna(run[c]) and float(run[c]) > 0 for c in needed):
            excluded[index] = "no positive energy, duration or samples recorded"
        else:
            keep.append(index)
    runs = runs_df.loc[keep]
    features = run_features(runs)
    for index, reason in features["feature_error"].dropna().items():
        excluded[index] = reason
    ok = features["feature_error"].isna()
    return runs.loc[ok], features.loc[ok], excluded


def _candidates(families: tuple[str, ...], search_iter: int, seed: int) -> list[tuple[str, dict]]:
    from sklearn.model_selection import ParameterSampler

    out: list[tuple[str, dict]] = []
    for family in families:
        if family not in _SEARCH_SPACE:
            raise ConfigError(
                f"PRE model family must be one of {', '.join(ALL_FAMILIES)}, got {family!r}."
            )
        space = _SEARCH_SPACE[family]
        size = math.prod(len(v) for v in space.values())
        for params in ParameterSampler(space, n_iter=min(search_iter, size), random_state=seed):
            out.append((family, dict(params)))
    return out


def _splits(groups: np.ndarray, max_folds: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped folds: one group per fold (leave one group out) up to ``max_folds``, else
    GroupKFold."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    if n_groups < 2:
        return []
    n_splits = n_groups if max_folds is None else min(max_folds, n_groups)
    dummy = np.zeros((len(groups), 1))
    return list(GroupKFold(n_splits=n_splits).split(dummy, groups=groups))


def _oof_chain(
    time_family: tuple[str, dict],
    power_family: tuple[str, dict],
    rows: _Rows,
    medians: dict[str, float],
    time_s: np.ndarray,
    power_w: np.ndarray,
    splits: list[tuple[np.ndarray, np.ndarray]],
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold (time per sample, power) of a chain over the splits."""
    t_oof = np.full(len(rows), np.nan)
    p_oof = np.full(len(rows), np.nan)
    for train, test in splits:
        chain = _Chain(time_family, power_family, seed, medians).fit(
            rows.take(train), time_s[train], power_w[train]
        )
        t_oof[test], p_oof[test] = chain.predict(rows.take(test))
    return t_oof, p_oof


def fit_pre(
    runs_df: pd.DataFrame,
    *,
    min_configs: int = MIN_CONFIGS,
    families: tuple[str, ...] = FAMILIES,
    search_iter: int = 4,
    interval: float = 0.9,
    seed: int = 0,
) -> PreModel:
    """Fit PRE on measured runs (columns of the ``runs`` table).

    Needs runs of at least ``min_configs`` distinct configurations (DataError otherwise).
    ``search_iter``: settings tried per model family. ``interval``: the prediction interval's
    coverage, from held-out residual quantiles.
    """
    if not 0 < interval < 1:
        raise ConfigError(f"the PRE interval must be a fraction in (0, 1), got {interval!r}.")
    candidates = _candidates(tuple(families), search_iter, seed)
    runs, features, excluded = training_table(runs_df)
    config_groups = _groups(runs, features)
    n_configs = len(set(config_groups))
    if n_configs < min_configs:
        raise DataError(
            f"PRE needs measured runs of at least {min_configs} distinct configurations to fit, "
            f"and there are {n_configs}."
        )
    table = features.reset_index(drop=True)
    samples = runs["samples"].to_numpy(dtype=float)
    time_s = runs["duration_s"].to_numpy(dtype=float) / samples
    power_w = runs["energy_total_j"].to_numpy(dtype=float) / runs["duration_s"].to_numpy(
        dtype=float
    )
    medians = medians_of(table)
    every = make_rows(table, medians)
    model_keys = _model_keys(table)
    if len(set(model_keys)) >= 3:
        selection, selection_name = model_keys, "model"
    else:
        selection, selection_name = config_groups, "configuration"
    splits = _splits(selection, 5)

    # 1. the time model
    rows = []
    best_time: tuple[float, tuple[str, dict], np.ndarray] | None = None
    for family, params in candidates:
        oof = np.full(len(every), np.nan)
        for train, test in splits:
            train_rows = every.take(train)
            design = _Design.fit(train_rows, time_s[train])
            time_model = _TimeModel(family, params, seed).fit(design, train_rows, time_s[train])
            oof[test] = time_model.predict(design, every.take(test))
        mae = float(np.mean(np.abs(_log(oof) - _log(time_s))))
        rows.append(_cv_row("time", family, params, mae))
        if best_time is None or mae < best_time[0]:
            best_time = (mae, (family, params), oof)
    assert best_time is not None
    time_mae, time_family, time_oof = best_time

    # 2. the power model, fed the time model's out-of-fold time as it will be at prediction
    best_power: tuple[float, tuple[str, dict], np.ndarray] | None = None
    for family, params in candidates:
        oof = np.full(len(every), np.nan)
        for train, test in splits:
            train_rows, test_rows = every.take(train), every.take(test)
            design = _Design.fit(train_rows, time_s[train])
            power_model = _PowerModel(family, params, seed).fit(
                design, train_rows, time_s[train], power_w[train] / train_rows.tdp_w
            )
            oof[test] = power_model.predict(design, test_rows, time_oof[test]) * test_rows.tdp_w
        mae = float(np.mean(np.abs(_log(oof) - _log(power_w))))
        rows.append(_cv_row("power", family, params, mae))
        if best_power is None or mae < best_power[0]:
            best_power = (mae, (family, params), oof)
    assert best_power is not None
    power_mae, power_family, power_oof = best_power
    energy_mae = float(np.mean(np.abs(_log(time_oof * power_oof) - _log(time_s * power_w))))

    # 3. held-out residuals per protocol, for the intervals
    protocol_groups = {
        "configuration": (config_groups, 10),
        "model": (model_keys, None),
        "family": (model_families(table), None),
        "precision": (table["precision"].astype(str).to_numpy(), None),
        "batch_size": (table["batch_size"].astype(str).to_numpy(), None),
    }
    residuals: dict[str, dict[str, np.ndarray]] = {}
    for protocol, (groups, max_folds) in protocol_groups.items():
        protocol_splits = _splits(groups, max_folds)
        if not protocol_splits:
            continue
        t_oof, p_oof = _oof_chain(
            time_family, power_family, every, medians, time_s, power_w, protocol_splits, seed
        )
        residuals[protocol] = {
            "time": _log(time_s) - _log(t_oof),
            "energy": _log(time_s * power_w) - _log(t_oof * p_oof),
        }
        if protocol in DISTANCE_PROTOCOLS:
            distance = np.zeros(len(table))
            for train, test in protocol_splits:
                distance[test] = Coverage.of(table.iloc[train]).distances(table.iloc[test])
            residuals[protocol]["distance"] = distance
        if protocol == "family":  # every held-out family weighs the same, whatever its size
            labels = pd.Series(groups)
            residuals[protocol]["weight"] = 1.0 / labels.map(labels.value_counts()).to_numpy(
                dtype=float
            )
    if "configuration" not in residuals:  # a single configuration cannot happen (min_configs)
        raise DataError("PRE could not hold out any configuration.")

    widening = _widening(residuals, interval)
    chain = _Chain(time_family, power_family, seed, medians).fit(every, time_s, power_w)
    assert chain.design is not None
    physics_time = _TimeModel("physics", {"fit": "relative"}, seed).fit(chain.design, every, time_s)
    gpu_names = table["gpu_name"].astype(str).to_numpy()
    transfer = _transfer_residuals(
        time_family, power_family, table, every, medians, time_s, power_w, config_groups, seed
    )
    if transfer is not None:
        residuals["gpu"] = transfer
    codes = np.array([REGIMES.index(r) for r in physics_time.regime(every)], dtype=float)
    names = sorted(set(gpu_names))
    machines = np.array([names.index(g) for g in gpu_names], dtype=float)
    for parts in residuals.values():  # each held-out run's regime and GPU, for its stratum
        parts["regime"] = codes
        parts["machine"] = machines
    physics_power = _PowerModel("physics", {"fit": "relative"}, seed).fit(
        chain.design, every, time_s, power_w / every.tdp_w
    )
    conf = residuals["configuration"]
    t_low, t_high = _quantiles(conf["time"], interval)
    e_low, e_high = _quantiles(conf["energy"], interval)
    power_res = _log(power_w) - _log(power_oof)
    p_low, p_high = _quantiles(power_res, interval)
    counts = table["model"].value_counts() if "model" in table else pd.Series(dtype=int)
    gpu_counts = table["gpu_name"].value_counts()
    seen = _Seen(
        models=tuple(sorted(str(m) for m in counts.index)),
        costs=tuple(
            sorted(
                {
                    (round(float(g), 6), round(float(p), 0))
                    for g, p in zip(table["gflops_per_sample"], table["params"], strict=True)
                }
            )
        ),
        precisions=tuple(p for p in PRECISIONS if p in set(table["precision"])),
        batch_sizes=tuple(sorted({float(b) for b in table["batch_size"]})),
        gpu_counts=tuple(sorted({float(g) for g in table["gpus"]})),
        gpu_names=tuple(sorted(str(g) for g in gpu_counts.index)),
        reference_gpu=str(gpu_counts.index[0]),
        limit_fractions=tuple(sorted({round(float(f), 3) for f in table["power_limit_fraction"]})),
        model_precisions=tuple(
            sorted(
                {
                    (str(m), str(p))
                    for m, p in zip(table["model"], table["precision"], strict=True)
                    if m is not None and not pd.isna(m)
                }
            )
        ),
        families=tuple(sorted(set(model_families(table)))),
        marks_per_step=tuple(sorted({round(float(m), 4) for m in _marks_per_step(table)})),
        transfer_distance=_measured_transfer_distance(sorted(set(gpu_names))),
    )
    return PreModel(
        time=_Fitted(time_family[0], time_family[1], chain.time, time_mae, t_low, t_high),
        power=_Fitted(power_family[0], power_family[1], chain.power, power_mae, p_low, p_high),
        energy=_Fitted("power x time", {}, chain, energy_mae, e_low, e_high),
        n_runs=len(runs),
        n_configs=n_configs,
        interval=interval,
        cv_table=pd.DataFrame(rows),
        excluded=excluded,
        chain=chain,
        physics_time=physics_time,
        physics_power=physics_power,
        residuals=residuals,
        seen=seen,
        selection_groups=selection_name,
        coverage=Coverage.of(table),
        widening=widening,
    )


def _measured_transfer_distance(gpu_names: list[str]) -> float:
    """The largest spec distance between two measured GPUs (0 with one), at amp-bf16."""
    specs = [lookup_gpu(name) for name in gpu_names]
    return max(
        (gpu_spec_distance(a, b, "amp-bf16") for a in specs for b in specs if a is not b),
        default=0.0,
    )


def _transfer_residuals(
    time_family: tuple[str, dict],
    power_family: tuple[str, dict],
    table: pd.DataFrame,
    every: _Rows,
    medians: dict[str, float],
    time_s: np.ndarray,
    power_w: np.ndarray,
    config_groups: np.ndarray,
    seed: int,
) -> dict[str, np.ndarray] | None:
    """Leave one GPU out, through the transfer a prediction for a new GPU makes: fit on the
    other GPUs' runs, predict this GPU's on the one nearest it in specs and scale by the spec
    ratios (``transfer_chain``). Log residuals of time and energy per run; None when fewer than
    two GPUs have MIN_CONFIGS configurations each."""
    gpus = table["gpu_name"].astype(str).to_numpy()
    names = sorted(set(gpus))
    if len(names) < 2 or any(len(set(config_groups[gpus == name])) < MIN_CONFIGS for name in names):
        return None
    t_pred = np.full(len(table), np.nan)
    p_pred = np.full(len(table), np.nan)
    for name in names:
        test = np.flatnonzero(gpus == name)
        train = np.flatnonzero(gpus != name)
        train_rows = every.take(train)
        chain = _Chain(time_family, power_family, seed, medians).fit(
            train_rows, time_s[train], power_w[train]
        )
        assert chain.design is not None
        physics = _TimeModel("physics", {"fit": "relative"}, seed).fit(
            chain.design, train_rows, time_s[train]
        )
        others = [lookup_gpu(n) for n in names if n != name]
        target = lookup_gpu(name)
        for precision in sorted(set(table["precision"].iloc[test].astype(str))):
            rows = test[table["precision"].iloc[test].astype(str).to_numpy() == precision]
            reference = min(others, key=lambda spec: gpu_spec_distance(target, spec, precision))
            t_ref, p_ref, t_ratio, p_ratio = transfer_chain(
                chain, physics, table.iloc[rows], reference
            )
            t_pred[rows] = t_ref * t_ratio
            p_pred[rows] = p_ref * p_ratio
    return {
        "time": _log(time_s) - _log(t_pred),
        "energy": _log(time_s * power_w) - _log(t_pred * p_pred),
    }


def _widening(residuals: dict[str, dict[str, np.ndarray]], interval: float) -> dict[str, Widening]:
    """The distance widening of energy and time, from the held-out runs of DISTANCE_PROTOCOLS
    (each run with its distance from the rows its fold was fitted on)."""
    parts = [residuals[p] for p in DISTANCE_PROTOCOLS if p in residuals]
    if not parts:
        return {}
    distance = np.concatenate([p["distance"] for p in parts])
    return {
        target: Widening.fit(np.concatenate([p[target] for p in parts]), distance, interval)
        for target in ("energy", "time")
    }


def _cv_row(target: str, family: str, params: dict, mae: float) -> dict[str, Any]:
    return {
        "target": target,
        "family": family,
        "params": params,
        "cv_mae_log": mae,
        "cv_error_percent": _mae_to_percent(mae),
    }
