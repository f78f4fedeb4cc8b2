"""STEP's calibrated interval: where step-level projections landed on measured reference runs.

The band of a step-level projection (``RateProjection.energy_low_j``/``energy_high_j``) says how
much the rate moved inside the steady window; it is not a confidence interval (docs/estimation.md
has how often it held the measured total). This module gives STEP an interval that *is*
calibrated: for each fraction of the budget seen, the relative errors
``(projected - measured) / measured`` of the reference runs' replayed projections
(``bench/evaluate_step.py --write-calibration``) give split-conformal bounds ``q_lo``, ``q_hi``,
and a projection E made after that fraction gets

    measured in [E / (1 + q_hi), E / (1 + q_lo)]

with the stated level (90 %) over runs like the reference runs. A projection made after a share
of the budget between two calibrated fractions uses the smaller one (never errors calibrated on
more of the budget than the run has seen); one made before the smallest gets none. The shipped
table (``wattlab/data/step-calibration.csv``) says in its header which runs it was made from
(docs/estimation.md: how it was made and how it held on longer runs), and every interval names
its basis.

Split-conformal bounds (Vovk et al.; Lei et al. 2018): with n calibration errors sorted, the
lower bound is the k_lo-th smallest, k_lo = floor((n + 1) x alpha / 2), the upper the k_hi-th,
k_hi = ceil((n + 1) x (1 - alpha / 2)); for a new run exchangeable with the calibration runs each
tail holds at most alpha / 2. With too few runs for k_lo >= 1 and k_hi <= n there is no interval.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

from wattlab.errors import ConfigError, DataError

DEFAULT_LEVEL = 0.9
CALIBRATION_NAME = "step-calibration.csv"
_COLUMNS = ("fraction", "runs", "error_low", "error_high")


def conformal_bounds(errors: Sequence[float], level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Split-conformal (low, high) bounds of relative errors at ``level``; DataError when there
    are too few errors to state them."""
    if not 0 < level < 1:
        raise ConfigError(f"the interval level must be in (0, 1), got {level!r}.")
    values = sorted(float(e) for e in errors if e is not None and math.isfinite(float(e)))
    n = len(values)
    alpha = 1 - level
    k_lo = math.floor(round((n + 1) * alpha / 2, 9))  # rounded: 1 - 0.9 is 0.0999...
    k_hi = math.ceil(round((n + 1) * (1 - alpha / 2), 9))
    if k_lo < 1 or k_hi > n:
        need = math.ceil(round(2 / alpha, 9)) - 1
        raise DataError(f"a {level:.0%} interval needs at least {need} calibration runs, got {n}.")
    return values[k_lo - 1], values[k_hi - 1]


def held_out_bounds(
    errors: Mapping[Any, float], groups: Mapping[Any, str] | None, level: float = DEFAULT_LEVEL
) -> dict[str, tuple[float, float, int] | str]:
    """Per group, conformal (low, high, runs) bounds fitted on the errors of the runs outside
    it (``groups``: run -> group; None: one group "all", fitted on every run), or the reason
    there are none: how an interval is judged where nobody calibrated it."""
    group_of = (lambda run: "all") if groups is None else (lambda run: str(groups[run]))
    out: dict[str, tuple[float, float, int] | str] = {}
    for group in sorted({group_of(run) for run in errors}):
        others = [e for run, e in errors.items() if groups is None or group_of(run) != group]
        try:
            out[group] = (*conformal_bounds(others, level), len(others))
        except DataError as error:
            out[group] = str(error).rstrip(".")
    return out


@dataclass(frozen=True)
class StepCalibration:
    """Relative-error bounds of step-level STEP per fraction of the budget seen (ascending)."""

    fractions: tuple[float, ...]
    runs: tuple[int, ...]
    error_low: tuple[float, ...]
    error_high: tuple[float, ...]
    level: float = DEFAULT_LEVEL
    source: str = ""

    def __post_init__(self) -> None:
        sizes = {len(self.fractions), len(self.runs), len(self.error_low), len(self.error_high)}
        if len(sizes) != 1 or not self.fractions:
            raise DataError("a STEP calibration needs one row per fraction, and at least one.")
        if list(self.fractions) != sorted(set(self.fractions)):
            raise DataError("a STEP calibration's fractions must rise, each once.")
        for f, lo, hi in zip(self.fractions, self.error_low, self.error_high, strict=True):
            if not (0 < f < 1 and -1 < lo <= hi):
                raise DataError(f"bad STEP calibration row at fraction {f}: bounds {lo}, {hi}.")

    def row_for(self, fraction_seen: float) -> int | None:
        """The row of the largest calibrated fraction <= ``fraction_seen`` (None below all)."""
        index = bisect.bisect_right(self.fractions, fraction_seen + 1e-9) - 1
        return index if index >= 0 else None

    def interval(self, energy_j: float, fraction_seen: float) -> tuple[float, float] | None:
        """(low, high) J for the measured total of a run projected at ``energy_j`` after
        ``fraction_seen`` of its budget; None when no calibrated fraction is that early."""
        row = self.row_for(fraction_seen)
        if row is None:
            return None
        return energy_j / (1 + self.error_high[row]), energy_j / (1 + self.error_low[row])

    def basis(self, fraction_seen: float) -> str:
        """One phrase naming what an interval at ``fraction_seen`` rests on."""
        row = self.row_for(fraction_seen)
        if row is None:
            return f"no calibration before {self.fractions[0]:.0%} of the budget" + (
                f" ({self.source})" if self.source else ""
            )
        where = f"; {self.source}" if self.source else ""
        return (
            f"{self.level:.0%} interval from the errors of {self.runs[row]} reference runs "
            f"projected after {self.fractions[row]:.0%}{where}"
        )


def fit_step_calibration(
    errors_by_fraction: Mapping[float, Sequence[float]],
    *,
    level: float = DEFAULT_LEVEL,
    source: str = "",
) -> StepCalibration:
    """Conformal bounds for each fraction with enough errors (fractions with too few are left
    out; DataError when none has enough)."""
    rows = []
    for fraction in sorted(errors_by_fraction):
        errors = [e for e in errors_by_fraction[fraction] if e is not None and math.isfinite(e)]
        try:
            low, high = conformal_bounds(errors, level)
        except DataError:
            continue
        rows.append((float(fraction), len(errors), low, high))
    if not rows:
        raise DataError("no fraction has enough projected runs for a calibrated STEP interval.")
    fractions, runs, lows, highs = zip(*rows, strict=True)
    return StepCalibration(fractions, runs, lows, highs, level=level, source=source)


def write_step_calibration(
    calibration: StepCalibration, path: str | Path, header: Sequence[str] = ()
) -> Path:
    """Write the table as CSV with ``# key: value`` header lines (level and source first),
    through the one atomic writer (never a half-written table, never through a link)."""
    from wattlab.jsonio import text_handle, write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(raw: BinaryIO) -> None:
        with text_handle(raw) as handle:
            handle.write(f"# level: {calibration.level:g}\n")
            handle.write(f"# source: {calibration.source}\n")
            for line in header:
                handle.write(f"# {line}\n")
            writer = csv.writer(handle)
            writer.writerow(_COLUMNS)
            for row in zip(
                calibration.fractions,
                calibration.runs,
                calibration.error_low,
                calibration.error_high,
                strict=True,
            ):
                writer.writerow([f"{row[0]:g}", row[1], f"{row[2]:.6f}", f"{row[3]:.6f}"])

    write_atomic(path, write)
    return path


def default_calibration_path() -> Path:
    """The shipped table: ``wattlab/data/step-calibration.csv`` in the installed package."""
    return Path(str(resources.files("wattlab") / "data" / CALIBRATION_NAME))


def load_step_calibration(path: str | Path | None = None) -> StepCalibration:
    """Read a table written by :func:`write_step_calibration` (default: the shipped one);
    DataError saying what is wrong when it cannot be read."""
    path = Path(path) if path is not None else default_calibration_path()
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise DataError(f"cannot read the STEP calibration {path}: {exc.strerror}.") from None
    meta: dict[str, str] = {}
    for line in lines:
        if line.startswith("#"):
            key, _, value = line[1:].partition(":")
            meta.setdefault(key.strip(), value.strip())
    body = [line for line in lines if line.strip() and not line.startswith("#")]
    rows = list(csv.DictReader(body))
    if not rows or tuple(rows[0]) != _COLUMNS:
        raise DataError(f"{path} is not a STEP calibration (columns {', '.join(_COLUMNS)}).")
    try:
        return StepCalibration(
            tuple(float(r["fraction"]) for r in rows),
            tuple(int(r["runs"]) for r in rows),
            tuple(float(r["error_low"]) for r in rows),
            tuple(float(r["error_high"]) for r in rows),
            level=float(meta.get("level", DEFAULT_LEVEL)),
            source=meta.get("source", ""),
        )
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path} has a row that is not numbers: {exc}.") from None
