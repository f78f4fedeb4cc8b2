"""The baseline: the one configuration every other is compared with in "against the
baseline" figures. Chosen with ``--baseline KEY=VALUE,...`` or by default (fewest GPUs, fp32,
highest power limit)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from wattlab.analysis.runs_table import CONFIG_COLUMNS, as_float
from wattlab.errors import ConfigError
from wattlab.train.config import PRECISIONS

_POWER_ATOL_W = 0.5  # a requested "250" matches a limit read back as 249.9 W


def parse_baseline(text: str, flag: str = "--baseline") -> dict[str, str]:
    """Parse ``--baseline KEY=VALUE,KEY=VALUE`` (or ``flag``'s) into ``{key: value}`` (values
    stay strings; :func:`find_baseline` converts them to the column's type)."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"{flag} must be KEY=VALUE pairs separated by commas, e.g. "
                f"gpus=1,precision=fp32, got {text!r}."
            )
        out[key.strip()] = value.strip()
    if not out:
        raise ConfigError(f"{flag} needs at least one KEY=VALUE pair, got {text!r}.")
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
        p_rank = PRECISIONS.index(precision) if precision in PRECISIONS else 99
        req = as_float(row.get("power_limit_requested_w"), math.inf)
        in_force = as_float(row.get("power_limit_w"), math.inf)
        return (gpus, world, p_rank, -req, -in_force, str(row.get("label")))

    return str(min(summary.iterrows(), key=key)[0])


def select_config(runs: pd.DataFrame, text: str) -> pd.DataFrame:
    """The runs of one configuration, chosen as ``--config KEY=VALUE,...`` chooses it (the same
    keys and matching as ``--baseline``, on the runs' own columns). ConfigError when the
    filters match no run, or runs of more than one configuration."""
    wanted = parse_baseline(text, "--config")
    allowed = [c for c in ("label", "config_hash", *CONFIG_COLUMNS, "power_limit_w") if c in runs]
    for key in wanted:
        if key not in allowed:
            raise ConfigError(
                f"--config key {key!r} is not a configuration column; use one of "
                f"{', '.join(allowed)}."
            )
    hit = [all(_matches(row.get(k), v, k) for k, v in wanted.items()) for _, row in runs.iterrows()]
    chosen = runs[hit]
    labels = sorted({str(x) for x in runs["label"]}) if "label" in runs else []
    if chosen.empty:
        raise ConfigError(
            f"--config {text} matches no run; the configurations are: {'; '.join(labels)}."
        )
    found = sorted({str(x) for x in chosen["label"]})
    if chosen["config_hash"].astype("object").nunique() > 1:
        raise ConfigError(
            f"--config {text} matches {len(found)} configurations ({'; '.join(found)}), not one; "
            "add keys to pick one."
        )
    return chosen


# grid axes (RunConfig fields) whose runs-table column has another name
_AXIS_COLUMNS = {"power_limit_w": "power_limit_requested_w", "nproc": "world_size"}


def spec_baseline(spec: Mapping[str, object], config_hashes: set[str]) -> dict[str, object] | None:
    """The baseline a sweep spec declares (its ``baseline:`` key) as a ``find_baseline``
    filter: the baseline point's config_hash when runs of it are stored, else its axes as runs
    columns. None when the spec declares none (the default baseline applies)."""
    if not spec.get("baseline"):
        return None
    from wattlab.experiment.specs.command import CommandSweepSpec, is_command_spec
    from wattlab.experiment.specs.trainer import SweepSpec

    if is_command_spec(spec):  # a sweep of a command: its axes live in the label and config
        command = CommandSweepSpec.from_dict(dict(spec), source="the stored sweep spec")
        return {"config_hash": command.baseline_config_hash()}

    parsed = SweepSpec.from_dict(dict(spec), source="the stored sweep spec")
    config_hash = parsed.baseline_config_hash()
    if config_hash in config_hashes:
        return {"config_hash": config_hash}
    return {_AXIS_COLUMNS.get(k, k): v for k, v in parsed.baseline_filter().items()}
