"""Per-configuration statistics of measured runs: medians, bootstrap CIs, change against a
baseline, GPU scaling, the Pareto front, the operating region and CodeCarbon's error.

Every function takes plain pandas DataFrames whose columns are those of the ``runs`` table in
``wattlab/experiment/schema.sql`` (units are in the column names: ``duration_s`` in seconds,
``energy_*_j`` in joules, ``co2e_*_kg`` in kilograms of CO2e). Nothing here reads a database or
draws a figure.

Words used below:

* a *configuration* is the set of ``status == 'ok'`` rows of ``runs`` that share a
  ``config_hash`` (shown by its ``label``);
* a *change* is ``value / baseline_value - 1`` of medians (a fraction; negative = less time or
  less energy than the baseline);
* the *operating region* holds the configurations that save at least ``min_saving`` of the
  baseline's energy for at most ``max_penalty`` more time.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.meters.base import Provenance

# The operating region's defaults. 3 % is above the run-to-run noise of a counter-measured
# training budget (typically 0.5-2 %), and 2 % more time is a penalty most people accept for
# it; the reference study's 250 W region (4.6-9.6 % saved for 0.7-1.9 % more time) falls inside.
DEFAULT_MIN_SAVING = 0.03
DEFAULT_MAX_PENALTY = 0.02
DEFAULT_N_BOOT = 2000
CI_LEVEL = 0.95

# Columns that describe a configuration (taken from the first run of each configuration).
CONFIG_COLUMNS = (
    "model",
    "stem",
    "dataset",
    "device",
    "gpus",
    "world_size",
    "precision",
    "batch_size",
    "power_limit_requested_w",
)
# Measured columns summarised by a median and a bootstrap CI.
METRICS = (
    "duration_s",
    "energy_total_j",
    "energy_gpu_j",
    "energy_cpu_j",
    "energy_dram_j",
    "energy_other_j",
    "energy_per_sample_j",
    "co2e_kg",
    "accuracy",
)
# Columns summarised by a median only.
MEDIAN_ONLY = ("co2e_low_kg", "co2e_high_kg", "power_limit_w", "samples", "wall_s", "epochs")
# Facts about where and how a configuration was measured (its first run's value).
CONTEXT_COLUMNS = ("gpu_name", "cpu_model", "intensity_kg_per_kwh", "pue")
REQUIRED_COLUMNS = ("status", "config_hash", "label", "duration_s", "energy_total_j")

PRECISION_ORDER = ("fp32", "tf32", "amp-bf16", "amp-fp16")
_PROVENANCE_RANK = {"measured": 0, "sampled": 1, "estimated": 2, "unknown": 3}
_INT_COLUMNS = ("gpus", "world_size", "batch_size")
_POWER_ATOL_W = 0.5  # a requested "250" matches a limit read back as 249.9 W


# --------------------------------------------------------------------------- small helpers


def _check_columns(runs: pd.DataFrame, required: Iterable[str], what: str) -> None:
    missing = [c for c in required if c not in runs.columns]
    if missing:
        raise DataError(
            f"the {what} table lacks the column(s) {', '.join(missing)}; "
            "it must have the columns of the runs table in wattlab/experiment/schema.sql."
        )


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` whose status is 'ok'."""
    _check_columns(runs, ("status",), "runs")
    return runs[runs["status"].astype("object") == "ok"]


def failed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` whose status is not 'ok'."""
    _check_columns(runs, ("status",), "runs")
    return runs[runs["status"].astype("object") != "ok"]


def numeric(series: pd.Series) -> np.ndarray:
    """A column as float64, non-numbers as NaN."""
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _seed_for(seed: int, key: str, metric: str) -> list[int]:
    """A stable per-(configuration, metric) seed so adding a configuration changes nothing else."""
    return [int(seed), zlib.crc32(str(key).encode()), zlib.crc32(metric.encode())]


def weakest_provenance(values: Iterable[object]) -> str:
    """The weakest of several provenance strings; a missing or unknown one gives 'unknown'
    (a number whose origin is unknown is never reported as measured)."""
    worst = "measured"
    seen = False
    for value in values:
        seen = True
        text = value.value if isinstance(value, Provenance) else value
        if not isinstance(text, str) or text not in _PROVENANCE_RANK:
            text = "unknown"
        if _PROVENANCE_RANK[text] > _PROVENANCE_RANK[worst]:
            worst = text
    return worst if seen else "unknown"


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int | Sequence[int] = 0,
    level: float = CI_LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the median of ``values`` (units of the values).

    NaNs are dropped; fewer than two values give ``(nan, nan)`` (no interval from one run).
    The same seed always gives the same interval. The interval is widened, if resampling noise
    ever puts it there, to contain the sample median.
    """
    x = np.asarray(values, dtype="float64")
    x = x[~np.isnan(x)]
    if x.size < 2 or n_boot < 1:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(int(n_boot), x.size))
    medians = np.median(x[idx], axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    med = float(np.median(x))
    return (float(min(lo, med)), float(max(hi, med)))


def bootstrap_change_ci(
    values: Sequence[float] | np.ndarray,
    baseline_values: Sequence[float] | np.ndarray,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int | Sequence[int] = 0,
    level: float = CI_LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``median(values) / median(baseline_values) - 1`` (a fraction),
    resampling both groups independently. ``(nan, nan)`` when either has fewer than two values."""
    x = np.asarray(values, dtype="float64")
    b = np.asarray(baseline_values, dtype="float64")
    x, b = x[~np.isnan(x)], b[~np.isnan(b)]
    if x.size < 2 or b.size < 2 or n_boot < 1:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    mx = np.median(x[rng.integers(0, x.size, size=(int(n_boot), x.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, size=(int(n_boot), b.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = mx / mb - 1.0
    ratio = ratio[np.isfinite(ratio)]
    if ratio.size == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratio, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def relative_change(value: float, reference: float) -> float:
    """``value / reference - 1`` (a fraction); NaN when either is missing or reference is 0."""
    if value is None or reference is None:
        return math.nan
    value, reference = float(value), float(reference)
    if math.isnan(value) or math.isnan(reference) or reference == 0:
        return math.nan
    return value / reference - 1.0


# --------------------------------------------------------------------------- summarize


def _per_run_frame(ok: pd.DataFrame) -> pd.DataFrame:
    """The ok runs with the derived per-run columns the summary needs."""
    frame = ok.copy()
    for col in METRICS + MEDIAN_ONLY:
        if col not in frame.columns and col != "energy_per_sample_j":
            frame[col] = np.nan
    samples = numeric(frame["samples"])
    with np.errstate(divide="ignore", invalid="ignore"):
        per_sample = numeric(frame["energy_total_j"]) / samples
    per_sample[~np.isfinite(per_sample)] = np.nan
    frame["energy_per_sample_j"] = per_sample
    return frame


def _sort_key(row: Mapping[str, object]) -> tuple:
    def num(value: object, missing: float) -> float:
        try:
            out = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return missing
        return missing if math.isnan(out) else out

    precision = row.get("precision")
    p_rank = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else 99
    return (
        str(row.get("model") or ""),
        num(row.get("gpus"), 0.0),
        num(row.get("world_size"), 0.0),
        p_rank,
        str(precision or ""),
        -num(row.get("power_limit_requested_w"), math.inf),
        -num(row.get("power_limit_w"), math.inf),
        num(row.get("batch_size"), 0.0),
        str(row.get("label") or ""),
        str(row.get("config_hash") or ""),
    )


def summarize(
    runs: pd.DataFrame,
    baseline: Mapping[str, object] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per configuration (index: ``config_hash``) of the ok runs in ``runs``.

    Columns: ``label``, ``n`` (ok runs), ``n_failed``; the configuration axes in
    ``CONFIG_COLUMNS``; for every metric in ``METRICS`` its median under the metric's own name
    (``duration_s`` in s, ``energy_*_j`` in J, ``energy_per_sample_j`` in J/sample,
    ``co2e_kg`` in kg, ``accuracy`` as a fraction) and the 95 % percentile-bootstrap CI of the
    median as ``<metric>_ci_low`` / ``<metric>_ci_high`` (NaN with a single run); medians of
    ``co2e_low_kg``, ``co2e_high_kg``, ``power_limit_w`` (in force, W) and ``samples``;
    ``provenance`` (weakest over the configuration's runs); ``time_change`` and
    ``energy_change`` against the baseline (fractions, negative = saving) with bootstrap CIs
    (``*_ci_low`` / ``*_ci_high``); ``is_baseline``; and context columns ``gpu_name``,
    ``cpu_model``, ``intensity_kg_per_kwh``, ``pue``.

    ``baseline`` is ``{column: value}`` matching exactly one configuration (see
    :func:`find_baseline`); None picks :func:`default_baseline`.
    """
    _check_columns(runs, REQUIRED_COLUMNS, "runs")
    ok = ok_runs(runs)
    if ok.empty:
        raise DataError(
            f"there are no successful runs to summarise ({len(runs)} run(s) given, none with "
            "status 'ok')."
        )
    failed_counts = failed_runs(runs)["config_hash"].astype("object").value_counts().to_dict()
    frame = _per_run_frame(ok)
    rows: list[dict[str, Any]] = []
    per_config_values: dict[str, dict[str, np.ndarray]] = {}
    for config_hash, group in frame.groupby(frame["config_hash"].astype("object"), sort=False):
        first = group.iloc[0]
        row: dict[str, Any] = {"config_hash": config_hash, "label": str(first["label"])}
        row["n"] = len(group)
        row["n_failed"] = int(failed_counts.get(config_hash, 0))
        for col in CONFIG_COLUMNS + CONTEXT_COLUMNS:
            row[col] = first[col] if col in group.columns else None
            if row[col] is not None and not isinstance(row[col], str) and pd.isna(row[col]):
                row[col] = None
            elif col in _INT_COLUMNS and float(row[col]).is_integer():
                row[col] = int(row[col])  # a failed run's NULLs made the column float
        values: dict[str, np.ndarray] = {}
        for metric in METRICS:
            x = numeric(group[metric])
            values[metric] = x
            finite = x[~np.isnan(x)]
            row[metric] = float(np.median(finite)) if finite.size else math.nan
            lo, hi = bootstrap_ci(x, n_boot=n_boot, seed=_seed_for(seed, config_hash, metric))
            row[f"{metric}_ci_low"], row[f"{metric}_ci_high"] = lo, hi
        for col in MEDIAN_ONLY:
            x = numeric(group[col])
            x = x[~np.isnan(x)]
            row[col] = float(np.median(x)) if x.size else math.nan
        prov = group["provenance"] if "provenance" in group.columns else [None] * len(group)
        row["provenance"] = weakest_provenance(list(prov))
        per_config_values[config_hash] = values
        rows.append(row)
    rows.sort(key=_sort_key)
    summary = pd.DataFrame(rows).set_index("config_hash", drop=False)
    summary.index.name = None
    base_hash = find_baseline(summary, baseline) if baseline else default_baseline(summary)
    summary["is_baseline"] = summary.index == base_hash
    base_row = summary.loc[base_hash]
    base_vals = per_config_values[base_hash]
    for name, metric in (("time_change", "duration_s"), ("energy_change", "energy_total_j")):
        changes, lows, highs = [], [], []
        for config_hash, row in summary.iterrows():
            changes.append(relative_change(row[metric], base_row[metric]))
            if config_hash == base_hash:
                lows.append(math.nan)
                highs.append(math.nan)
                continue
            lo, hi = bootstrap_change_ci(
                per_config_values[config_hash][metric],
                base_vals[metric],
                n_boot=n_boot,
                seed=_seed_for(seed, f"{config_hash}/{base_hash}", name),
            )
            lows.append(lo)
            highs.append(hi)
        summary[name] = changes
        summary[f"{name}_ci_low"] = lows
        summary[f"{name}_ci_high"] = highs
    return summary


# --------------------------------------------------------------------------- baseline


def parse_baseline(text: str) -> dict[str, str]:
    """Parse ``--baseline KEY=VALUE,KEY=VALUE`` into ``{key: value}`` (values stay strings;
    :func:`find_baseline` converts them to the column's type)."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--baseline must be KEY=VALUE pairs separated by commas, e.g. "
                f"gpus=1,precision=fp32, got {text!r}."
            )
        out[key.strip()] = value.strip()
    if not out:
        raise ConfigError(f"--baseline needs at least one KEY=VALUE pair, got {text!r}.")
    return out


_NULL_WORDS = {"", "none", "null", "default", "nan"}


def _matches(cell: object, wanted: object, column: str) -> bool:
    cell_missing = cell is None or (not isinstance(cell, str) and pd.isna(cell))
    if isinstance(wanted, str) and wanted.strip().lower() in _NULL_WORDS:
        return cell_missing
    if wanted is None or (isinstance(wanted, float) and math.isnan(wanted)):
        return cell_missing
    if cell_missing:
        return False
    if isinstance(cell, (int, float, np.integer, np.floating)) and not isinstance(cell, bool):
        try:
            target = float(str(wanted).strip().removesuffix("W").removesuffix("w"))
        except ValueError:
            return False
        atol = _POWER_ATOL_W if column.endswith("_w") else 1e-9
        return abs(float(cell) - target) <= atol
    return str(cell) == str(wanted).strip()


def find_baseline(summary: pd.DataFrame, baseline: Mapping[str, object]) -> str:
    """The ``config_hash`` of the one configuration matching every ``{column: value}`` of
    ``baseline`` (numbers compare as numbers, power limits within 0.5 W; 'default'/'none'
    matches a missing value, e.g. ``power_limit_requested_w=default``)."""
    allowed = [
        c for c in ("label", "config_hash", *CONFIG_COLUMNS, "power_limit_w") if c in summary
    ]
    for key in baseline:
        if key not in allowed:
            raise ConfigError(
                f"baseline key {key!r} is not a configuration column; use one of "
                f"{', '.join(allowed)}."
            )
    hits = [
        h
        for h, row in summary.iterrows()
        if all(_matches(row[k], v, k) for k, v in baseline.items())
    ]
    if len(hits) == 1:
        return str(hits[0])
    described = ",".join(f"{k}={v}" for k, v in baseline.items())
    labels = "; ".join(str(x) for x in summary["label"])
    if not hits:
        raise ConfigError(
            f"baseline {described} matches no configuration; the configurations are: {labels}."
        )
    matched = "; ".join(str(summary.loc[h, "label"]) for h in hits)
    raise ConfigError(
        f"baseline {described} matches {len(hits)} configurations ({matched}), not one; "
        f"add keys to pick one of: {labels}."
    )


def default_baseline(summary: pd.DataFrame) -> str:
    """The default baseline's ``config_hash``: the fewest GPUs (processes on the CPU), fp32 if
    present (else the highest precision), the highest power limit (a default limit counts as
    highest), then the first label in sort order."""

    def key(item: tuple[str, pd.Series]) -> tuple:
        _, row = item
        gpus = as_float(row.get("gpus"), math.inf)
        world = as_float(row.get("world_size"), math.inf)
        precision = row.get("precision")
        p_rank = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else 99
        req = as_float(row.get("power_limit_requested_w"), math.inf)
        in_force = as_float(row.get("power_limit_w"), math.inf)
        return (gpus, world, p_rank, -req, -in_force, str(row.get("label")))

    return str(min(summary.iterrows(), key=key)[0])


def as_float(value: object, missing: float) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return missing
    return missing if math.isnan(out) else out


# --------------------------------------------------------------------------- scaling, pareto


def _scale_count(summary: pd.DataFrame) -> pd.Series:
    """GPU count per configuration; on the CPU, the process count (``world_size``)."""
    missing = pd.Series(np.nan, index=summary.index)
    gpus = pd.to_numeric(summary["gpus"], errors="coerce") if "gpus" in summary else None
    world = (
        pd.to_numeric(summary["world_size"], errors="coerce") if "world_size" in summary else None
    )
    if gpus is None:
        return world if world is not None else missing
    if world is not None and "device" in summary:
        on_cpu = summary["device"].astype("object") == "cpu"
        gpus = gpus.where(~on_cpu, world)
    return gpus


def _group_key(row: pd.Series, columns: Sequence[str]) -> tuple:
    out = []
    for col in columns:
        value = row.get(col)
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            out.append(None)
        else:
            out.append(value)
    return tuple(out)


SCALING_GROUP = (
    "model",
    "stem",
    "dataset",
    "device",
    "precision",
    "power_limit_requested_w",
    "batch_size",
)
POWER_GROUP = tuple(c for c in CONFIG_COLUMNS if c != "power_limit_requested_w")


def scaling_efficiency(summary: pd.DataFrame) -> pd.DataFrame:
    """GPU scaling per group of configurations that differ only in their GPU count.

    Groups share model, stem, dataset, device, precision, requested power limit and global
    batch size. The reference is the group's smallest count N0 (1 when present): ``speedup`` =
    time(N0) / time(N); ``energy_ratio`` = energy(N) / energy(N0); ``scaling_efficiency`` =
    speedup / (N / N0). Only groups with at least two counts appear. Columns: the group
    columns, ``gpus``, ``reference_gpus``, ``label``, ``reference_label``, ``time_s``,
    ``energy_j``, ``speedup``, ``energy_ratio``, ``scaling_efficiency``.
    """
    count = _scale_count(summary)
    cols = [c for c in SCALING_GROUP if c in summary.columns]
    groups: dict[tuple, list[str]] = {}
    for config_hash, row in summary.iterrows():
        if pd.isna(count[config_hash]):
            continue
        groups.setdefault(_group_key(row, cols), []).append(config_hash)
    records: list[dict[str, Any]] = []
    for key, members in groups.items():
        counts = {float(count[h]) for h in members}
        if len(counts) < 2:
            continue
        members = sorted(members, key=lambda h: (float(count[h]), summary.loc[h, "label"]))
        ref = members[0]
        n0 = float(count[ref])
        t0 = float(summary.loc[ref, "duration_s"])
        e0 = float(summary.loc[ref, "energy_total_j"])
        for h in members:
            n = float(count[h])
            t = float(summary.loc[h, "duration_s"])
            e = float(summary.loc[h, "energy_total_j"])
            speedup = t0 / t if t > 0 else math.nan
            rec: dict[str, Any] = dict(zip(cols, key, strict=True))
            rec.update(
                config_hash=h,
                label=summary.loc[h, "label"],
                gpus=int(n),
                reference_gpus=int(n0),
                reference_label=summary.loc[ref, "label"],
                time_s=t,
                energy_j=e,
                speedup=speedup,
                energy_ratio=e / e0 if e0 > 0 else math.nan,
                scaling_efficiency=speedup / (n / n0),
            )
            records.append(rec)
    columns = [
        *cols,
        "config_hash",
        "label",
        "gpus",
        "reference_gpus",
        "reference_label",
        "time_s",
        "energy_j",
        "speedup",
        "energy_ratio",
        "scaling_efficiency",
    ]
    return pd.DataFrame(records, columns=columns)


def pareto_front(df: pd.DataFrame, time_col: str, energy_col: str) -> list:
    """Index labels of the rows not dominated in (time, energy), both minimised.

    A row is dominated when another row is no worse in both and strictly better in one; rows
    with identical values are therefore both kept. Rows with a missing value are left out.
    The result is ordered by time, then energy.
    """
    t = pd.to_numeric(df[time_col], errors="coerce")
    e = pd.to_numeric(df[energy_col], errors="coerce")
    valid = [i for i in df.index if not (pd.isna(t[i]) or pd.isna(e[i]))]
    front = []
    for i in valid:
        dominated = any(
            t[j] <= t[i] and e[j] <= e[i] and (t[j] < t[i] or e[j] < e[i]) for j in valid
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (float(t[i]), float(e[i])))


def in_region(
    time_change: float, energy_change: float, min_saving: float, max_penalty: float
) -> bool:
    """Whether a (time, energy) change pair lies in the operating region: energy saved
    ``>= min_saving`` and time penalty ``<= max_penalty`` (less time counts as no penalty)."""
    if time_change is None or energy_change is None:
        return False
    if math.isnan(time_change) or math.isnan(energy_change):
        return False
    eps = 1e-12  # so a change of exactly the threshold counts despite rounding
    return -energy_change >= min_saving - eps and max(time_change, 0.0) <= max_penalty + eps


def check_thresholds(min_saving: float, max_penalty: float) -> None:
    if not (isinstance(min_saving, (int, float)) and 0 <= min_saving < 1):
        raise ConfigError(
            f"--min-saving must be a fraction in [0, 1), e.g. 0.03, got {min_saving}."
        )
    if not (isinstance(max_penalty, (int, float)) and max_penalty >= 0):
        raise ConfigError(f"--max-penalty must be a fraction >= 0, e.g. 0.02, got {max_penalty}.")


def operating_region(
    summary: pd.DataFrame,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
) -> list:
    """Index labels (``config_hash``) of the configurations whose energy saving against the
    baseline is at least ``min_saving`` and whose time penalty is at most ``max_penalty``
    (fractions; a time change <= 0 counts as no penalty). Defaults: 3 % saving, 2 % penalty.
    Ordered by energy change, largest saving first."""
    check_thresholds(min_saving, max_penalty)
    hits = [
        h
        for h, row in summary.iterrows()
        if in_region(row.get("time_change"), row.get("energy_change"), min_saving, max_penalty)
    ]
    return sorted(hits, key=lambda h: float(summary.loc[h, "energy_change"]))


def power_limit_effects(
    summary: pd.DataFrame,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
) -> pd.DataFrame:
    """The effect of the power limit alone: each configuration against the same configuration
    (model, GPUs, precision, batch size, ...) at its highest power limit (a default limit counts
    as highest). Only groups with at least two limits appear.

    Columns: the group columns, ``config_hash``, ``label``, ``power_limit_w`` (requested, else
    in force; NaN = default), ``reference_label``, ``time_s``, ``energy_j``, ``time_change``,
    ``energy_change`` (fractions) and ``in_operating_region``. This is how the reference study
    reads its power caps (250 W per GPU against 300 W at the same GPU count and precision).
    """
    check_thresholds(min_saving, max_penalty)
    cols = [c for c in POWER_GROUP if c in summary.columns]
    groups: dict[tuple, list[str]] = {}
    for config_hash, row in summary.iterrows():
        groups.setdefault(_group_key(row, cols), []).append(config_hash)

    def limit(h: str) -> float:
        req = as_float(summary.loc[h].get("power_limit_requested_w"), math.nan)
        return req

    def rank(h: str) -> tuple[float, float]:
        row = summary.loc[h]
        return (
            as_float(row.get("power_limit_requested_w"), math.inf),
            as_float(row.get("power_limit_w"), math.inf),
        )

    records: list[dict[str, Any]] = []
    for key, members in groups.items():
        distinct = {rank(h) for h in members}
        if len(distinct) < 2:
            continue
        members = sorted(
            members, key=lambda h: (tuple(-x for x in rank(h)), summary.loc[h, "label"])
        )
        ref = members[0]
        t0 = summary.loc[ref, "duration_s"]
        e0 = summary.loc[ref, "energy_total_j"]
        for h in members:
            tc = relative_change(summary.loc[h, "duration_s"], t0)
            ec = relative_change(summary.loc[h, "energy_total_j"], e0)
            shown = limit(h)
            if math.isnan(shown):
                shown = as_float(summary.loc[h].get("power_limit_w"), math.nan)
            rec: dict[str, Any] = dict(zip(cols, key, strict=True))
            rec.update(
                config_hash=h,
                label=summary.loc[h, "label"],
                power_limit_w=shown,
                is_default_limit=math.isnan(limit(h)),
                reference_label=summary.loc[ref, "label"],
                time_s=float(summary.loc[h, "duration_s"]),
                energy_j=float(summary.loc[h, "energy_total_j"]),
                time_change=tc,
                energy_change=ec,
                in_operating_region=in_region(tc, ec, min_saving, max_penalty),
            )
            records.append(rec)
    columns = [
        *cols,
        "config_hash",
        "label",
        "power_limit_w",
        "is_default_limit",
        "reference_label",
        "time_s",
        "energy_j",
        "time_change",
        "energy_change",
        "in_operating_region",
    ]
    return pd.DataFrame(records, columns=columns)


# --------------------------------------------------------------------------- CodeCarbon


def _spread(values: np.ndarray) -> dict[str, Any]:
    """n, median, median of |x|, quartiles, IQR, min, max of fractions (NaN-free input)."""
    if values.size == 0:
        return {
            "n": 0,
            "median": None,
            "median_abs": None,
            "q1": None,
            "q3": None,
            "iqr": None,
            "min": None,
            "max": None,
        }
    q1, med, q3 = np.quantile(values, [0.25, 0.5, 0.75])
    return {
        "n": int(values.size),
        "median": float(med),
        "median_abs": float(np.median(np.abs(values))),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def parse_json_cell(cell: object) -> dict[str, Any] | None:
    if isinstance(cell, dict):
        return cell
    if not isinstance(cell, str) or not cell.strip():
        return None
    try:
        out = json.loads(cell)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


CODECARBON_COMPONENTS = (
    ("gpu", "gpu_j", "energy_gpu_j"),
    ("cpu", "cpu_j", "energy_cpu_j"),
    ("ram", "ram_j", "energy_dram_j"),
)


def codecarbon_errors(runs: pd.DataFrame) -> dict[str, Any]:
    """CodeCarbon's energy against the direct measurement, over the ok runs that have both.

    Per run: ``rel_error = (codecarbon_energy_j - energy_total_j) / energy_total_j`` (a
    fraction, recomputed; ``stored_rel_error`` is the table's ``codecarbon_rel_error`` and
    ``stored_matches`` says whether it agrees within 1e-6). Totals: ``n``, ``median``,
    ``median_abs`` (median of |error|, how the reference study's 4.09 % reads), ``q1``, ``q3``,
    ``iqr``, ``min``, ``max``; ``components`` gives the same per component (gpu vs
    ``energy_gpu_j``, cpu vs ``energy_cpu_j``, ram vs ``energy_dram_j``) where both exist.
    ``measured`` is False when no run has CodeCarbon figures.
    """
    empty = {
        "measured": False,
        **_spread(np.array([])),
        "runs": [],
        "components": {},
        "mismatches": [],
    }
    if "status" not in runs.columns or "codecarbon_energy_j" not in runs.columns:
        return empty
    ok = ok_runs(runs)
    cc = numeric(ok["codecarbon_energy_j"])
    direct = numeric(ok["energy_total_j"]) if "energy_total_j" in ok else np.full(len(ok), np.nan)
    use = ~np.isnan(cc) & ~np.isnan(direct) & (direct > 0)
    if not use.any():
        return empty
    stored = numeric(ok["codecarbon_rel_error"]) if "codecarbon_rel_error" in ok else None
    per_run: list[dict[str, Any]] = []
    errors: list[float] = []
    mismatches: list[Any] = []
    comp_errors: dict[str, list[float]] = {name: [] for name, _, _ in CODECARBON_COMPONENTS}
    for pos in np.flatnonzero(use):
        row = ok.iloc[pos]
        err = (cc[pos] - direct[pos]) / direct[pos]
        errors.append(err)
        stored_err = None if stored is None or np.isnan(stored[pos]) else float(stored[pos])
        matches = stored_err is None or abs(stored_err - err) <= 1e-6 * max(1.0, abs(err))
        run_id = row.get("id")
        run_id = None if run_id is None or pd.isna(run_id) else int(run_id)
        if not matches:
            mismatches.append(run_id)
        rec: dict[str, Any] = {
            "run_id": run_id,
            "label": str(row.get("label")),
            "codecarbon_energy_j": float(cc[pos]),
            "energy_total_j": float(direct[pos]),
            "rel_error": float(err),
            "stored_rel_error": stored_err,
            "stored_matches": bool(matches),
        }
        parts = parse_json_cell(row.get("codecarbon_components_json"))
        for name, cc_key, ours_col in CODECARBON_COMPONENTS:
            theirs = as_float((parts or {}).get(cc_key), math.nan)
            ours = as_float(row.get(ours_col), math.nan)
            if math.isnan(theirs) or math.isnan(ours) or ours <= 0:
                rec[f"{name}_rel_error"] = None
                continue
            rec[f"{name}_rel_error"] = (theirs - ours) / ours
            comp_errors[name].append((theirs - ours) / ours)
        per_run.append(rec)
    return {
        "measured": True,
        **_spread(np.asarray(errors)),
        "runs": per_run,
        "components": {
            name: _spread(np.asarray(vals)) for name, vals in comp_errors.items() if vals
        },
        "mismatches": mismatches,
    }


# --------------------------------------------------------------------------- JSON


def jsonable(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None, containers recursively."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    return value


def intensity_range(runs: pd.DataFrame) -> tuple[float, float] | None:
    """The low/high carbon intensity (kgCO2e/kWh) behind ``co2e_low_kg``/``co2e_high_kg``,
    recovered as intensity x low/value (the table stores the CO2e, not the range)."""
    need = ("co2e_kg", "co2e_low_kg", "co2e_high_kg", "intensity_kg_per_kwh")
    if not all(c in runs.columns for c in need):
        return None
    ok = ok_runs(runs)
    value, low, high = (
        numeric(ok["co2e_kg"]),
        numeric(ok["co2e_low_kg"]),
        numeric(ok["co2e_high_kg"]),
    )
    intensity = numeric(ok["intensity_kg_per_kwh"])
    use = (value > 0) & ~np.isnan(low) & ~np.isnan(high) & ~np.isnan(intensity)
    if not use.any():
        return None
    lows = intensity[use] * low[use] / value[use]
    highs = intensity[use] * high[use] / value[use]
    return (float(np.median(lows)), float(np.median(highs)))


def _config_record(row: pd.Series, pareto: set, region: set, axes: Sequence[str]) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "label": row["label"],
        "config_hash": row["config_hash"],
        "axes": {a: row.get(a) for a in axes if a in row.index},
        "n": row["n"],
        "n_failed": row.get("n_failed", 0),
        "time_s": row["duration_s"],
        "time_s_ci": [row["duration_s_ci_low"], row["duration_s_ci_high"]],
        "energy_j": row["energy_total_j"],
        "energy_j_ci": [row["energy_total_j_ci_low"], row["energy_total_j_ci_high"]],
        "energy_gpu_j": row.get("energy_gpu_j"),
        "energy_cpu_j": row.get("energy_cpu_j"),
        "energy_dram_j": row.get("energy_dram_j"),
        "energy_other_j": row.get("energy_other_j"),
        "energy_per_sample_j": row.get("energy_per_sample_j"),
        "energy_per_sample_j_ci": [
            row.get("energy_per_sample_j_ci_low"),
            row.get("energy_per_sample_j_ci_high"),
        ],
        "co2e_kg": row.get("co2e_kg"),
        "co2e_kg_ci": [row.get("co2e_kg_ci_low"), row.get("co2e_kg_ci_high")],
        "co2e_low_kg": row.get("co2e_low_kg"),
        "co2e_high_kg": row.get("co2e_high_kg"),
        "accuracy": row.get("accuracy"),
        "accuracy_ci": [row.get("accuracy_ci_low"), row.get("accuracy_ci_high")],
        "power_limit_w": row.get("power_limit_w"),
        "provenance": row.get("provenance"),
        "time_change": row.get("time_change"),
        "time_change_ci": [row.get("time_change_ci_low"), row.get("time_change_ci_high")],
        "energy_change": row.get("energy_change"),
        "energy_change_ci": [row.get("energy_change_ci_low"), row.get("energy_change_ci_high")],
        "is_baseline": bool(row.get("is_baseline", False)),
        "pareto": row["config_hash"] in pareto,
        "operating_region": row["config_hash"] in region,
    }
    return rec


def summary_to_json(
    summary: pd.DataFrame,
    runs: pd.DataFrame | None = None,
    *,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
) -> dict[str, Any]:
    """A machine-readable summary (JSON-safe: NaN becomes null). Keys:

    ``configurations`` (one dict per configuration: ``label``, ``config_hash``, ``axes``, ``n``,
    ``time_s`` and ``energy_j`` medians with ``time_s_ci`` / ``energy_j_ci`` [low, high],
    per-component energies, ``energy_per_sample_j``, ``co2e_kg`` with ``co2e_low_kg`` /
    ``co2e_high_kg``, ``accuracy``, ``provenance``, ``time_change`` / ``energy_change`` with
    CIs, ``is_baseline``, ``pareto``, ``operating_region``), ``baseline`` (label, config_hash,
    axes), ``pareto`` and ``operating_region`` (labels), ``criteria`` (min_saving,
    max_penalty), ``scaling`` (rows of :func:`scaling_efficiency`), ``power_limit_effects``,
    ``codecarbon`` (:func:`codecarbon_errors`, or ``{"measured": false}`` without runs),
    ``provenance`` (weakest over all configurations), and with ``runs``: ``runs`` (ok and
    failed counts, failures with their errors), ``hardware`` and ``carbon``.
    """
    pareto = pareto_front(summary, "duration_s", "energy_total_j")
    region = operating_region(summary, min_saving, max_penalty)
    axes = [c for c in (*CONFIG_COLUMNS, "power_limit_w") if c in summary.columns]
    base = summary[summary["is_baseline"]].iloc[0]
    out: dict[str, Any] = {
        "configurations": [
            _config_record(row, set(pareto), set(region), axes) for _, row in summary.iterrows()
        ],
        "baseline": {
            "label": base["label"],
            "config_hash": base["config_hash"],
            "axes": {a: base.get(a) for a in axes},
        },
        "pareto": [summary.loc[h, "label"] for h in pareto],
        "operating_region": [summary.loc[h, "label"] for h in region],
        "criteria": {"min_saving": min_saving, "max_penalty": max_penalty},
        "scaling": scaling_efficiency(summary).to_dict(orient="records"),
        "power_limit_effects": power_limit_effects(summary, min_saving, max_penalty).to_dict(
            orient="records"
        ),
        "provenance": weakest_provenance(summary["provenance"]),
        "codecarbon": codecarbon_errors(runs) if runs is not None else {"measured": False},
    }
    if runs is not None:
        failed = failed_runs(runs)
        out["runs"] = {
            "ok": int(len(ok_runs(runs))),
            "failed": int(len(failed)),
            "failures": [
                {
                    "run_id": r.get("id"),
                    "label": r.get("label"),
                    "repetition": r.get("repetition"),
                    "error": r.get("error"),
                }
                for _, r in failed.iterrows()
            ],
        }
        out["hardware"] = hardware(runs)
        rng = intensity_range(runs)
        ok = ok_runs(runs)
        out["carbon"] = {
            "intensity_kg_per_kwh": _unique(ok, "intensity_kg_per_kwh"),
            "intensity_range_kg_per_kwh": list(rng) if rng else None,
            "pue": _unique(ok, "pue"),
        }
    return jsonable(out)


def _unique(frame: pd.DataFrame, column: str) -> list:
    """Distinct non-missing values of a column, in first-seen order."""
    if column not in frame.columns:
        return []
    seen: list = []
    for value in frame[column]:
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            continue
        if value not in seen:
            seen.append(value)
    return seen


def hardware(runs: pd.DataFrame) -> dict[str, list]:
    """Distinct GPU names, CPU models, hosts and drivers over the ok runs."""
    ok = ok_runs(runs)
    return {
        "gpu_name": _unique(ok, "gpu_name"),
        "cpu_model": _unique(ok, "cpu_model"),
        "hostname": _unique(ok, "hostname"),
        "driver": _unique(ok, "driver"),
        "device": _unique(ok, "device"),
    }
