"""PRE, Pre-training Regression-based Estimation: predict a budget before it runs.

Regressors trained on measured runs predict energy per training sample (J) and time per sample
(s) from features known in advance (``features.py``); multiplying by the budget's samples gives
energy and duration. Both targets and every numeric feature are log-transformed: time per
sample is close to FLOPs / (GPUs x peak rate x efficiency), a product, which is linear in logs.

Model choice: Ridge, Kernel Ridge (RBF) and Gradient Boosting, each in a Pipeline (log +
StandardScaler on numeric features, OneHotEncoder(handle_unknown="ignore") on precision, the
target standardised), with a small seeded random search over their settings; the candidate with
the lowest grouped cross-validation error (mean |log(predicted / measured)|) wins, separately
for each target. Folds (GroupKFold, up to 5) are grouped by ``config_hash``, so repetitions of
one configuration never sit on both sides of a split. The feature preprocessing uses no target
and is fitted once on the training runs; the regressors are fitted inside each fold.

Interval: the chosen candidate's out-of-fold log residuals give quantiles (5 % and 95 % by
default); a prediction's interval is prediction x exp(quantile).
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
from wattlab.estimate.features import (
    CATEGORICAL_FEATURES,
    NUMERIC_FEATURES,
    config_features,
    run_features,
)

MIN_CONFIGS = 4
FAMILIES = ("ridge", "kernel_ridge", "gradient_boosting")
_SEARCH_SPACE: dict[str, dict[str, list[Any]]] = {
    "ridge": {"alpha": [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]},
    "kernel_ridge": {"alpha": [1e-3, 1e-2, 1e-1, 1.0], "gamma": [0.01, 0.03, 0.1, 0.3, 1.0]},
    "gradient_boosting": {
        "n_estimators": [50, 100],
        "max_depth": [2, 3],
        "learning_rate": [0.05, 0.1],
    },
}


def _safe_log(x: Any) -> Any:
    return np.log(np.clip(np.asarray(x, dtype=float), 1e-12, None))


def _regressor(family: str, params: dict[str, Any], seed: int) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.linear_model import Ridge

    if family == "ridge":
        return Ridge(**params)
    if family == "kernel_ridge":
        return KernelRidge(kernel="rbf", **params)
    if family == "gradient_boosting":
        return GradientBoostingRegressor(random_state=seed, **params)
    raise ConfigError(f"PRE model family must be one of {', '.join(FAMILIES)}, got {family!r}.")


def make_columns() -> Any:
    """The unsupervised preprocessing: log + standardise numeric features, one-hot precision."""
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

    numeric = Pipeline([("log", FunctionTransformer(_safe_log)), ("scale", StandardScaler())])
    return ColumnTransformer(
        [
            ("numeric", numeric, list(NUMERIC_FEATURES)),
            (
                "categorical",
                OneHotEncoder(handle_unknown="ignore", sparse_output=False),
                list(CATEGORICAL_FEATURES),
            ),
        ]
    )


def make_regressor(family: str, params: dict[str, Any], seed: int = 0) -> Any:
    """One candidate model, with the (log) target standardised around it."""
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.preprocessing import StandardScaler

    return TransformedTargetRegressor(
        regressor=_regressor(family, params, seed), transformer=StandardScaler()
    )


def make_pipeline(family: str, params: dict[str, Any], seed: int = 0) -> Any:
    """The full sklearn Pipeline: ``make_columns()`` then ``make_regressor(...)``."""
    from sklearn.pipeline import Pipeline

    return Pipeline([("features", make_columns()), ("model", make_regressor(family, params, seed))])


def _candidates(families: tuple[str, ...], search_iter: int, seed: int) -> list[tuple[str, dict]]:
    from sklearn.model_selection import ParameterSampler

    out: list[tuple[str, dict]] = []
    for family in families:
        if family not in _SEARCH_SPACE:
            raise ConfigError(
                f"PRE model family must be one of {', '.join(FAMILIES)}, got {family!r}."
            )
        space = _SEARCH_SPACE[family]
        size = math.prod(len(v) for v in space.values())
        for params in ParameterSampler(space, n_iter=min(search_iter, size), random_state=seed):
            out.append((family, dict(params)))
    return out


@dataclass
class _Fitted:
    family: str
    params: dict[str, Any]
    pipeline: Any
    cv_mae_log: float  # mean |log(pred / actual)| out of fold
    residual_low: float  # log residual quantiles (actual - predicted)
    residual_high: float


@dataclass(frozen=True)
class PrePrediction:
    """PRE's prediction for one configuration. Units: J, s."""

    energy_j: float
    duration_s: float
    energy_low_j: float
    energy_high_j: float
    duration_low_s: float
    duration_high_s: float
    energy_per_sample_j: float
    time_per_sample_s: float
    samples: float

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class PreModel:
    """Fitted PRE regressors for energy and time per sample, with their CV errors."""

    energy: _Fitted
    time: _Fitted
    n_runs: int
    n_configs: int
    interval: float
    cv_table: pd.DataFrame = field(repr=False)
    excluded: dict[Any, str] = field(default_factory=dict, repr=False)  # run index -> reason

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        """Predictions for feature rows (``config_features``/``run_features`` columns incl.
        ``samples``). Columns: energy_j, duration_s, energy_low_j, energy_high_j,
        duration_low_s, duration_high_s, energy_per_sample_j, time_per_sample_s, samples."""
        missing = [
            c for c in (*NUMERIC_FEATURES, *CATEGORICAL_FEATURES, "samples") if c not in features
        ]
        if missing:
            raise DataError(f"PRE features lack the columns {', '.join(missing)}.")
        samples = features["samples"].to_numpy(dtype=float)
        log_e = self.energy.pipeline.predict(features)
        log_t = self.time.pipeline.predict(features)
        e_ps, t_ps = np.exp(log_e), np.exp(log_t)
        return pd.DataFrame(
            {
                "energy_j": e_ps * samples,
                "duration_s": t_ps * samples,
                "energy_low_j": e_ps * samples * math.exp(self.energy.residual_low),
                "energy_high_j": e_ps * samples * math.exp(self.energy.residual_high),
                "duration_low_s": t_ps * samples * math.exp(self.time.residual_low),
                "duration_high_s": t_ps * samples * math.exp(self.time.residual_high),
                "energy_per_sample_j": e_ps,
                "time_per_sample_s": t_ps,
                "samples": samples,
            },
            index=features.index,
        )

    def predict_one(self, features: pd.DataFrame) -> PrePrediction:
        """The prediction for a single feature row."""
        if len(features) != 1:
            raise DataError(f"predict_one takes one feature row, got {len(features)}.")
        row = self.predict(features).iloc[0]
        return PrePrediction(**{k: float(v) for k, v in row.items()})

    def predict_config(self, **config: Any) -> PrePrediction:
        """Predict a configuration that has not run; keywords as ``features.config_features``
        (model, gpus, precision, epochs, gpu_name, batch_size, stem, image_size, train_size,
        power_limit_w, gpu_tdp_w, ...)."""
        return self.predict_one(config_features(**config))

    def describe(self) -> str:
        """Which models won and how well they did out of fold."""
        return (
            f"energy/sample: {_describe(self.energy)}; time/sample: {_describe(self.time)}; "
            f"{self.interval:.0%} interval from CV residuals; fitted on {self.n_runs} runs of "
            f"{self.n_configs} configurations"
        )


def _describe(fitted: _Fitted) -> str:
    params = ", ".join(f"{k}={v:g}" for k, v in sorted(fitted.params.items()))
    return f"{fitted.family} ({params}), CV error {_mae_to_percent(fitted.cv_mae_log):.1f} %"


def _mae_to_percent(mae_log: float) -> float:
    return (math.exp(mae_log) - 1.0) * 100.0


def _groups(runs: pd.DataFrame, features: pd.DataFrame) -> np.ndarray:
    if "config_hash" in runs and runs["config_hash"].notna().all():
        return runs["config_hash"].astype(str).to_numpy()
    keys = features[list(NUMERIC_FEATURES) + list(CATEGORICAL_FEATURES)].astype(str)
    return np.array(
        [hashlib.sha256("|".join(row).encode()).hexdigest()[:16] for row in keys.to_numpy()]
    )


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
    coverage, from out-of-fold residual quantiles.
    """
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import Pipeline

    if not 0 < interval < 1:
        raise ConfigError(f"the PRE interval must be a fraction in (0, 1), got {interval!r}.")
    runs, features, excluded = training_table(runs_df)
    groups = _groups(runs, features)
    n_configs = len(set(groups))
    if n_configs < min_configs:
        raise DataError(
            f"PRE needs measured runs of at least {min_configs} distinct configurations to fit, "
            f"and there are {n_configs}."
        )
    samples = runs["samples"].to_numpy(dtype=float)
    targets = {
        "energy": np.log(runs["energy_total_j"].to_numpy(dtype=float) / samples),
        "time": np.log(runs["duration_s"].to_numpy(dtype=float) / samples),
    }
    # The preprocessing uses no target, so it is fitted once on the training runs' features;
    # the regressors are cross-validated on grouped folds.
    columns = make_columns().fit(features)
    x = columns.transform(features)
    splits = list(GroupKFold(n_splits=min(5, n_configs)).split(x, groups=groups))
    candidates = _candidates(tuple(families), search_iter, seed)
    tail = (1.0 - interval) / 2.0
    rows = []
    chosen: dict[str, _Fitted] = {}
    for target, y in targets.items():
        best: tuple[float, str, dict, np.ndarray] | None = None
        for family, params in candidates:
            oof = np.empty_like(y)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tiny folds: ill-conditioned KRR solves
                for train, test in splits:
                    model = make_regressor(family, params, seed).fit(x[train], y[train])
                    oof[test] = model.predict(x[test])
            mae = float(np.mean(np.abs(oof - y)))
            rows.append(
                {
                    "target": target,
                    "family": family,
                    "params": params,
                    "cv_mae_log": mae,
                    "cv_error_percent": _mae_to_percent(mae),
                }
            )
            if best is None or mae < best[0]:
                best = (mae, family, params, y - oof)
        assert best is not None
        mae, family, params, residuals = best
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            regressor = make_regressor(family, params, seed).fit(x, y)
        chosen[target] = _Fitted(
            family=family,
            params=params,
            pipeline=Pipeline([("features", columns), ("model", regressor)]),
            cv_mae_log=mae,
            # the interval always contains the point prediction
            residual_low=min(0.0, float(np.quantile(residuals, tail))),
            residual_high=max(0.0, float(np.quantile(residuals, 1.0 - tail))),
        )
    return PreModel(
        energy=chosen["energy"],
        time=chosen["time"],
        n_runs=len(runs),
        n_configs=n_configs,
        interval=interval,
        cv_table=pd.DataFrame(rows),
        excluded=excluded,
    )
