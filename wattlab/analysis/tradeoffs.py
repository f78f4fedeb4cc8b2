"""Trade-offs between time and energy: the Pareto front and the operating region.

The *operating region* answers the reference study's question about power caps: which power
limits save energy for little extra time. Each configuration is compared with its own
uncapped twin: the configuration of the same model, stem, dataset, device, GPU count,
precision and batch size at that group's highest power limit (a default limit counts as the
highest). A configuration is in the region when it saves at least ``min_saving`` of its
twin's energy for at most ``max_penalty`` more time: by default 3 % saved for at most 2 %
slower (:data:`DEFAULT_MIN_SAVING`, :data:`DEFAULT_MAX_PENALTY`; ``wattlab report
--region-min-saving/--region-max-slowdown``). A group with a single power limit has no
region.

The comparison of every configuration with the one global baseline (a different precision
or GPU count included) is kept as :func:`region_against_baseline`, and reported under that
name: it mixes the effect of the power limit with everything else that differs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import CONFIG_COLUMNS, as_float, group_key, relative_change
from wattlab.errors import ConfigError

# 3 % is above the run-to-run noise of a counter-measured training budget (typically
# 0.5-2 %), and 2 % more time is a penalty most people accept for it; the reference study's
# 250 W region (4.6-9.6 % saved for 0.7-1.9 % more time) falls inside.
DEFAULT_MIN_SAVING = 0.03
DEFAULT_MAX_PENALTY = 0.02
# A group: everything that describes a configuration except its power limit.
POWER_GROUP = tuple(c for c in CONFIG_COLUMNS if c != "power_limit_requested_w")


def pareto_front(df: pd.DataFrame, time_col: str, energy_col: str) -> list:
    """Index labels of the rows not dominated in (time, energy), both minimised.

    A row is dominated when another row is no worse in both and strictly better in one; rows
    with identical values are therefore both kept. Rows with a missing value are left out.
    The result is ordered by time, then energy.
    """
    t_all = pd.to_numeric(df[time_col], errors="coerce").to_numpy(dtype=float)
    e_all = pd.to_numeric(df[energy_col], errors="coerce").to_numpy(dtype=float)
    keep = ~(np.isnan(t_all) | np.isnan(e_all))
    labels = [label for label, k in zip(df.index, keep, strict=True) if k]
    t, e = t_all[keep], e_all[keep]
    front = []
    for k, label in enumerate(labels):  # one vector comparison per row: 2 000 rows in ms
        dominated = (t <= t[k]) & (e <= e[k]) & ((t < t[k]) | (e < e[k]))
        if not dominated.any():
            front.append((float(t[k]), float(e[k]), k, label))
    return [label for *_, label in sorted(front, key=lambda x: (x[0], x[1], x[2]))]


# --pareto-axes names: (column of the summary, True when larger is better)
PARETO_AXES = {
    "energy": ("energy_total_j", False),
    "time": ("duration_s", False),
    "accuracy": ("accuracy", True),
}
DEFAULT_PARETO_AXES = ("energy", "time")


def parse_pareto_axes(text: str | None) -> tuple[str, ...]:
    """``energy,time[,accuracy]`` as a tuple of axis names; a ConfigError (one sentence) for
    an unknown or repeated name, or fewer than two."""
    from wattlab.errors import ConfigError

    if text is None:
        return DEFAULT_PARETO_AXES
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in PARETO_AXES]
    if unknown or len(set(names)) != len(names) or len(names) < 2:
        raise ConfigError(
            f"--pareto-axes takes two or three distinct names of {', '.join(PARETO_AXES)} "
            f"separated by commas (e.g. energy,time,accuracy), got {text!r}."
        )
    return names


# the same axes per image, when the configurations' runs saw different numbers of images
PER_IMAGE_COLUMNS = {"energy_total_j": "energy_per_sample_j", "duration_s": "duration_per_sample_s"}


def pareto_front_axes(
    df: pd.DataFrame, axes: tuple[str, ...] = DEFAULT_PARETO_AXES, per_image: bool = False
) -> list:
    """Index labels of the rows not dominated on ``axes`` (names of PARETO_AXES: energy and
    time minimised, accuracy maximised), of whole runs or, with ``per_image``, per image
    (``energy_per_sample_j``, ``duration_per_sample_s``). Rows with a missing value on an axis
    are left out; the result is ordered by time, then energy, then accuracy (best first)."""

    def col(column: str) -> str:
        return PER_IMAGE_COLUMNS.get(column, column) if per_image else column

    if tuple(axes) == DEFAULT_PARETO_AXES or tuple(axes) == ("time", "energy"):
        return pareto_front(df, col("duration_s"), col("energy_total_j"))
    cols = []
    for name in axes:
        column, larger_better = PARETO_AXES[name]
        column = col(column)
        values = (
            pd.to_numeric(df[column], errors="coerce")
            if column in df.columns
            else pd.Series(float("nan"), index=df.index)
        )
        cols.append(-values if larger_better else values)  # every axis minimised
    table = pd.concat(cols, axis=1)
    valid = [i for i in df.index if not table.loc[i].isna().any()]
    front = []
    for i in valid:
        a = table.loc[i].to_numpy()
        dominated = any(
            (table.loc[j].to_numpy() <= a).all() and (table.loc[j].to_numpy() < a).any()
            for j in valid
        )
        if not dominated:
            front.append(i)
    order = [axes.index(n) for n in ("time", "energy", "accuracy") if n in axes]
    return sorted(front, key=lambda i: tuple(float(table.loc[i].iloc[k]) for k in order))


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
    """ConfigError unless ``min_saving`` is a fraction in [0, 1) and ``max_penalty`` a finite
    fraction >= 0."""
    ok_saving = isinstance(min_saving, (int, float)) and 0 <= min_saving < 1
    if not ok_saving:
        raise ConfigError(
            f"--region-min-saving must be a fraction in [0, 1), e.g. 0.03, got {min_saving}."
        )
    ok_penalty = isinstance(max_penalty, (int, float)) and 0 <= max_penalty < math.inf
    if not ok_penalty:
        raise ConfigError(
            f"--region-max-slowdown must be a finite fraction >= 0, e.g. 0.02, got {max_penalty}."
        )


def operating_region(
    summary: pd.DataFrame,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
) -> list:
    """Index labels (``config_hash``) of the configurations in the operating region: saving at
    least ``min_saving`` of the energy of the same configuration at its group's highest power
    limit for at most ``max_penalty`` more time (fractions; less time counts as no penalty).
    See :func:`power_limit_effects`. Ordered by energy change, largest saving first."""
    effects = power_limit_effects(summary, min_saving, max_penalty)
    hits = effects[effects["in_operating_region"].astype(bool)]
    ordered = hits.sort_values(["energy_change", "label"], kind="stable")
    return list(ordered["config_hash"])


def region_against_baseline(
    summary: pd.DataFrame,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    per_image: bool = False,
) -> list:
    """Index labels of the configurations whose ``energy_change`` against the one global
    baseline (see :func:`wattlab.analysis.summary.summarize`) saves at least ``min_saving``
    for at most ``max_penalty`` more ``time_change`` (with ``per_image``, the changes per
    image). Not the operating region: a change of precision or GPU count counts here as much
    as the power limit. Largest saving first."""
    check_thresholds(min_saving, max_penalty)
    suffix = "_per_image" if per_image else ""
    t_col, e_col = f"time_change{suffix}", f"energy_change{suffix}"
    hits = [
        h
        for h, row in summary.iterrows()
        if not bool(row.get("is_baseline", False))
        and in_region(row.get(t_col), row.get(e_col), min_saving, max_penalty)
    ]
    return sorted(hits, key=lambda h: float(summary.loc[h, e_col]))


def power_limit_effects(
    summary: pd.DataFrame,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
) -> pd.DataFrame:
    """The effect of the power limit alone: each configuration against the same configuration
    (model, GPUs, precision, batch size, ...) at its highest power limit (a default limit counts
    as highest). Only groups with at least two limits appear.

    Columns: the group columns, ``config_hash``, ``label``, ``power_limit_w`` (requested, else
    in force; NaN = default), ``is_default_limit``, ``is_reference``, ``reference_label``,
    ``time_s``, ``energy_j``, ``time_change``, ``energy_change`` (fractions) and
    ``in_operating_region`` (never true for the reference itself). This is how the reference
    study reads its power caps (250 W per GPU against 300 W at the same GPU count and
    precision).
    """
    check_thresholds(min_saving, max_penalty)
    cols = [c for c in POWER_GROUP if c in summary.columns]
    rows = dict(zip(summary.index, summary.to_dict("records"), strict=True))  # no .loc per use
    groups: dict[tuple, list[str]] = {}
    for config_hash, row in summary.iterrows():
        groups.setdefault(group_key(row, cols), []).append(config_hash)

    def limit(h: str) -> float:
        req = as_float(rows[h].get("power_limit_requested_w"), math.nan)
        return req

    def rank(h: str) -> tuple[float, float]:
        row = rows[h]
        return (
            as_float(row.get("power_limit_requested_w"), math.inf),
            as_float(row.get("power_limit_w"), math.inf),
        )

    records: list[dict[str, Any]] = []
    for key, members in groups.items():
        distinct = {rank(h) for h in members}
        if len(distinct) < 2:
            continue
        members = sorted(members, key=lambda h: (tuple(-x for x in rank(h)), rows[h]["label"]))
        ref = members[0]
        t0 = rows[ref]["duration_s"]
        e0 = rows[ref]["energy_total_j"]
        for h in members:
            tc = relative_change(rows[h]["duration_s"], t0)
            ec = relative_change(rows[h]["energy_total_j"], e0)
            shown = limit(h)
            if math.isnan(shown):
                shown = as_float(rows[h].get("power_limit_w"), math.nan)
            rec: dict[str, Any] = dict(zip(cols, key, strict=True))
            rec.update(
                config_hash=h,
                label=rows[h]["label"],
                power_limit_w=shown,
                is_default_limit=math.isnan(limit(h)),
                reference_label=rows[ref]["label"],
                time_s=float(rows[h]["duration_s"]),
                energy_j=float(rows[h]["energy_total_j"]),
                time_change=tc,
                energy_change=ec,
                is_reference=h == ref,
                in_operating_region=h != ref and in_region(tc, ec, min_saving, max_penalty),
            )
            records.append(rec)
    columns = [
        *cols,
        "config_hash",
        "label",
        "power_limit_w",
        "is_default_limit",
        "is_reference",
        "reference_label",
        "time_s",
        "energy_j",
        "time_change",
        "energy_change",
        "in_operating_region",
    ]
    return pd.DataFrame(records, columns=columns)
