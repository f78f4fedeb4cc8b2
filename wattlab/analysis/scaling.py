"""GPU scaling: configurations that differ only in their GPU count (processes on the CPU),
against the group's smallest count."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import group_key


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


SCALING_GROUP = (
    "model",
    "stem",
    "dataset",
    "device",
    "precision",
    "power_limit_requested_w",
    "batch_size",
)


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
        groups.setdefault(group_key(row, cols), []).append(config_hash)
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
