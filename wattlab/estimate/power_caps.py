"""Power-cap effects without capping: a run's energy and time at GPU power limit L, predicted
from one uncapped run (its power trace, or only its mean draw).

Model (``CapLaw``), per GPU and per stretch of the trace drawing power p:

- p <= L: the cap never acts; time and energy are unchanged. So a cap at or above a run's
  draw can save nothing.
- p > L: the GPU lowers its clock until it draws about ``draw_ratio`` x L. With idle power
  P_i = ``idle_fraction`` x TDP and dynamic power ~ f^``alpha``, the clock falls to
  x = ((draw_ratio x L - P_i) / (p - P_i))^(1 / alpha) of its uncapped value, and the time of
  that stretch grows by ``beta`` / x + (1 - ``beta``) (``beta``: the share of the time that
  scales with the clock; the rest waits on memory, launches or the host). ``beta`` follows
  the uncapped run's draw: beta + ``beta_per_draw`` x (draw / TDP - 0.7), in 0..1. A GPU far
  below its TDP spends its time waiting (on memory, launches, its peers), which a lower clock
  does not lengthen; one near TDP is compute-bound.
- GPUs of one run advance together: the run's time stretches by the slowest GPU's stretch;
  every GPU draws min(p, draw_ratio x L) over the stretched time. Non-GPU energy (CPU, RAM)
  scales with the time.

Without a trace the run's draw is taken as two levels, half the time ``spread`` above and half
below its mean (peaks above a cap are what it clips first). The law's six numbers were fitted
(``fit_cap_law``, least squares on log time and log energy ratios) on the Zeus project's
measured power-limit profiles of an A40 and a V100 (``wattlab/data/zeus-profiles``, found by
``wattlab.estimate.zeus_profiles``; 12 files, 96 windows): ``DEFAULT_LAW`` (``ONE_BETA_LAW``:
the law before, one beta for all). ``evaluate_profiles`` checks the method leaving one file
out: each file's limits predicted from its highest-limit window by a law fitted on the other
files, and the operating region scored (true and false positives) against the constant
"never" and an in-sample ceiling.

Operating region (wattlab's defaults, after the reference study): limits that save at least
3 % energy for at most 2 % more time against the run's uncapped (highest-limit) twin.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db.stored_run import StoredRun

DRAW_PIVOT = 0.7  # the draw share of TDP at which a draw-sensitive law's beta is its beta
MIN_SAVING = 0.03  # the operating region: at least 3 % less energy ...
MAX_SLOWDOWN = 0.02  # ... for at most 2 % more time
DEFAULT_FRACTIONS = tuple(round(1.0 - 0.05 * i, 2) for i in range(15))  # 100 % .. 30 % of TDP


@dataclass(frozen=True)
class CapLaw:
    """How a GPU responds to a power cap (see the module docstring). Fractions in 0..1."""

    idle_fraction: float  # idle power as a fraction of the default limit (TDP)
    alpha: float  # dynamic power ~ clock^alpha
    beta: float  # share of the time that scales with the clock
    draw_ratio: float  # mean draw under a cap / the cap
    spread: float = 0.0  # without a trace: the draw taken as +-spread around its mean
    # beta's change per unit of the uncapped draw's share of TDP (around DRAW_PIVOT): a run far
    # below TDP waits on memory, launches or peers, so less of its time follows the clock
    beta_per_draw: float = 0.0

    def at_draw(self, draw_fraction: float) -> CapLaw:
        """The law for a run drawing ``draw_fraction`` of TDP uncapped: beta from the draw."""
        if self.beta_per_draw == 0.0:
            return self
        beta = self.beta + self.beta_per_draw * (draw_fraction - DRAW_PIVOT)
        return CapLaw(
            self.idle_fraction,
            self.alpha,
            float(min(1.0, max(0.0, beta))),
            self.draw_ratio,
            self.spread,
        )

    def stretch_and_power(
        self, power_w: np.ndarray, limit_w: float, tdp_w: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Time stretch (>= 1) and capped power (W) for uncapped powers ``power_w`` (W)."""
        power = np.asarray(power_w, dtype=float)
        target = self.draw_ratio * limit_w
        idle = self.idle_fraction * tdp_w
        capped = power > limit_w
        stretch = np.ones_like(power)
        if capped.any():
            dynamic = np.clip((target - idle) / np.clip(power - idle, 1e-9, None), 1e-3, 1.0)
            clock = dynamic ** (1.0 / self.alpha)
            stretch = np.where(capped, self.beta / clock + 1.0 - self.beta, 1.0)
        return np.maximum(stretch, 1.0), np.where(capped, np.minimum(power, target), power)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


FIT_START = CapLaw(idle_fraction=0.2, alpha=2.5, beta=0.8, draw_ratio=0.98, spread=0.2)
# fit_cap_law(all 12 Zeus profile files (A40, V100), draw_sensitive=True) from FIT_START; a test
# re-fits it. Leaving one file out, its energy and time errors are lower than ONE_BETA_LAW's.
DEFAULT_LAW = CapLaw(
    idle_fraction=0.321,
    alpha=2.475,
    beta=0.528,
    draw_ratio=1.000,
    spread=0.272,
    beta_per_draw=1.647,
)
# the law before: one beta for every run, whatever it draws (fit_cap_law(all 12 files))
ONE_BETA_LAW = CapLaw(idle_fraction=0.307, alpha=1.533, beta=0.428, draw_ratio=1.028, spread=0.252)
LAW_SOURCE = "fitted on the Zeus project's A40/V100 power-limit profiles (12 files)"
FITTED_DRAW_SHARES = (0.41, 0.92)  # the uncapped draws / TDP of those files


@dataclass(frozen=True)
class UncappedRun:
    """What one uncapped run tells: per GPU, stretches of (duration s, power W) from its power
    trace (one stretch at the mean draw when there is no trace); the measured budget time,
    GPU energy and other (CPU, RAM) energy; and the GPUs' default limit (TDP)."""

    segments: tuple[tuple[np.ndarray, np.ndarray], ...]  # per GPU: (durations s, powers W)
    duration_s: float
    gpu_energy_j: float
    other_energy_j: float
    tdp_w: float
    limit_w: float  # the limit the run ran under
    source: str = "mean draw"

    @property
    def gpus(self) -> int:
        return len(self.segments)

    @property
    def mean_draw_w(self) -> float:
        """Mean GPU power per GPU over the budget (W)."""
        return self.gpu_energy_j / self.duration_s / self.gpus

    @property
    def peak_draw_w(self) -> float:
        """The highest power in the trace (the mean draw without a trace), per GPU."""
        return max(float(np.max(p)) for _, p in self.segments)


def from_mean_draw(
    duration_s: float,
    gpu_energy_j: Sequence[float],
    tdp_w: float,
    limit_w: float | None = None,
    other_energy_j: float = 0.0,
) -> UncappedRun:
    """An uncapped run known only by its time and per-GPU energies (J)."""
    if not duration_s > 0 or not tdp_w > 0:
        raise DataError("an uncapped run needs a positive duration and TDP.")
    energies = [float(e) for e in gpu_energy_j]
    if not energies or any(not e > 0 for e in energies):
        raise DataError("an uncapped run needs a positive energy for every GPU.")
    segments = tuple((np.array([duration_s]), np.array([e / duration_s])) for e in energies)
    return UncappedRun(segments, duration_s, sum(energies), other_energy_j, tdp_w, limit_w or tdp_w)


@dataclass(frozen=True)
class CapPrediction:
    """Predicted energy (J) and time (s) at one limit (W per GPU), against the uncapped run."""

    limit_w: float
    energy_j: float
    duration_s: float
    saving: float  # 1 - energy / uncapped energy
    slowdown: float  # duration / uncapped duration - 1
    in_region: bool
    case: str  # "cap above the draw: no change" | "cap bites ..."


def predict_limit(run: UncappedRun, limit_w: float, law: CapLaw = DEFAULT_LAW) -> CapPrediction:
    """The run's energy and time at ``limit_w`` (W per GPU)."""
    if not limit_w > 0:
        raise ConfigError(f"a power limit must be a positive number of W, got {limit_w!r}.")
    law = law.at_draw(run.mean_draw_w / run.tdp_w)
    stretches, energies = [], []
    segments = run.segments
    if run.source.startswith("mean draw") and law.spread > 0:
        # no trace: stand in a two-level trace, half the time at +-spread around the mean
        segments = tuple(
            (np.repeat(d / 2, 2), np.array([p[0] * (1 - law.spread), p[0] * (1 + law.spread)]))
            for d, p in run.segments
        )
    for durations, powers in segments:
        stretch, capped_w = law.stretch_and_power(powers, limit_w, run.tdp_w)
        total = float(np.sum(durations))
        stretches.append(float(np.sum(durations * stretch)) / total)
        energies.append((durations * stretch, capped_w))
    factor = max(stretches)
    integrated = sum(float(np.sum(d * p)) for d, p in segments)
    scale = run.gpu_energy_j / integrated if integrated > 0 else 1.0  # trace -> counter
    gpu_j = 0.0
    for (durations, powers), (stretched, capped_w), own in zip(
        segments, energies, stretches, strict=True
    ):
        # a GPU that finishes its share early waits for the slowest at its lowest drawn power
        wait_s = float(np.sum(durations)) * (factor - own)
        gpu_j += float(np.sum(stretched * capped_w)) + wait_s * float(np.min(powers))
    gpu_j *= scale
    duration_s = run.duration_s * factor
    energy_j = gpu_j + run.other_energy_j * factor
    base_j = run.gpu_energy_j + run.other_energy_j
    saving = 1.0 - energy_j / base_j
    slowdown = factor - 1.0
    peak_w = max(float(np.max(p)) for _, p in segments)
    if limit_w >= peak_w:
        case = "cap above the draw: no change"
    elif limit_w >= run.mean_draw_w:
        case = "cap below the trace's peaks only: little change"
    else:
        case = "cap below the mean draw: time stretches, energy follows"
    return CapPrediction(
        limit_w=float(limit_w),
        energy_j=energy_j,
        duration_s=duration_s,
        saving=saving,
        slowdown=slowdown,
        in_region=bool(saving >= MIN_SAVING and slowdown <= MAX_SLOWDOWN),
        case=case,
    )


def region_flags(saving: float, slowdown: float, min_saving: float, max_slowdown: float) -> bool:
    """In the operating region: saves at least ``min_saving`` for at most ``max_slowdown``."""
    return bool(saving >= min_saving and slowdown <= max_slowdown)


@dataclass
class CapCurve:
    """Predictions over a list of limits, with the region's thresholds and what applies."""

    run: UncappedRun
    law: CapLaw
    points: list[CapPrediction]
    min_saving: float = MIN_SAVING
    max_slowdown: float = MAX_SLOWDOWN
    notes: list[str] = field(default_factory=list)

    @property
    def region(self) -> list[float]:
        return [p.limit_w for p in self.points if p.in_region]

    def summary(self) -> str:
        """One sentence: which case applies to this run."""
        draw = self.run.mean_draw_w
        if draw <= min(p.limit_w for p in self.points):
            return (
                f"the run draws {draw:.0f} W per GPU, below every limit considered: no cap "
                "here can save anything"
            )
        share = draw / self.run.tdp_w
        region = self.region
        where = (
            f"operating region {min(region):.0f}-{max(region):.0f} W"
            if region
            else f"no limit saves >= {self.min_saving:.0%} for <= {self.max_slowdown:.0%} more time"
        )
        return (
            f"the run draws {draw:.0f} W per GPU ({share:.0%} of its {self.run.tdp_w:.0f} W "
            f"limit): caps at or above {self.run.peak_draw_w:.0f} W change nothing, caps below "
            f"{draw:.0f} W bite; {where}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean_draw_w": self.run.mean_draw_w,
            "peak_draw_w": self.run.peak_draw_w,
            "tdp_w": self.run.tdp_w,
            "gpus": self.run.gpus,
            "source": self.run.source,
            "law": self.law.to_dict(),
            "law_source": LAW_SOURCE,
            "min_saving": self.min_saving,
            "max_slowdown": self.max_slowdown,
            "summary": self.summary(),
            "region_w": self.region,
            "points": [asdict(p) for p in self.points],
            "notes": self.notes,
        }


def predict_curve(
    run: UncappedRun,
    limits_w: Sequence[float] | None = None,
    *,
    law: CapLaw = DEFAULT_LAW,
    min_saving: float = MIN_SAVING,
    max_slowdown: float = MAX_SLOWDOWN,
) -> CapCurve:
    """Predictions at ``limits_w`` (default: 100 % to 30 % of TDP in 5 % steps)."""
    if not 0 <= min_saving < 1 or not max_slowdown >= 0:
        raise ConfigError(
            f"the region needs a saving in [0, 1) and a slowdown >= 0, got {min_saving!r} and "
            f"{max_slowdown!r}."
        )
    if limits_w is None:
        limits_w = [round(f * run.tdp_w) for f in DEFAULT_FRACTIONS]
    points = []
    for limit in sorted({float(x) for x in limits_w}, reverse=True):
        p = predict_limit(run, limit, law)
        flag = region_flags(p.saving, p.slowdown, min_saving, max_slowdown)
        points.append(CapPrediction(**{**asdict(p), "in_region": flag}))
    notes = [f"cap law {LAW_SOURCE}"]
    share = run.mean_draw_w / run.tdp_w
    low, high = FITTED_DRAW_SHARES
    if law.beta_per_draw != 0.0 and not low <= share <= high:
        notes.append(
            f"EXTRAPOLATING: the run draws {share:.0%} of TDP, outside the {low:.0%}-{high:.0%} "
            "the law's clock sensitivity was fitted on"
        )
    if run.limit_w < run.tdp_w:
        notes.append(
            f"the run itself ran capped at {run.limit_w:.0f} W; limits above it are not "
            "predicted reliably"
        )
    return CapCurve(run, law, points, min_saving, max_slowdown, notes)


# ---------------------------------------------------------------------------------------------
# A stored run


def run_from_store(
    runs: pd.DataFrame, windows: pd.DataFrame, trace: pd.DataFrame, run_id: int
) -> UncappedRun:
    """The uncapped-run summary of stored run ``run_id``: its budget window's GPU power trace
    (per GPU component), GPU and other energy, and TDP. DataError when the run cannot serve."""
    run = StoredRun.in_frame(runs, run_id)
    if run is None:
        raise DataError(f"there is no run with id {run_id} in the database.")
    if run.status != "ok":
        raise DataError(f"run {run_id} did not finish (status {run.status!r}).")
    if run.device == "cpu":
        raise DataError(f"run {run_id} ran on the CPU; power limits apply to GPUs.")
    duration, gpu_j, tdp = run.duration_s, run.energy_gpu_j, run.gpu_tdp_w
    total_j = run.energy_total_j
    if duration is None or gpu_j is None or not gpu_j > 0 or tdp is None:
        raise DataError(
            f"run {run_id} lacks the budget duration, GPU energy or TDP that the prediction needs."
        )
    limit = run.power_limit_w or tdp
    other = max(0.0, (total_j or gpu_j) - gpu_j)
    gpus = run.gpus or 1
    budget = windows[(windows["run_id"] == run_id) & (windows["name"] == "budget")]
    segments = _trace_segments(trace, run_id, budget)
    if len(segments) == gpus:
        return UncappedRun(tuple(segments), duration, gpu_j, other, tdp, limit, "power trace")
    per_gpu = [gpu_j / gpus] * gpus
    base = from_mean_draw(duration, per_gpu, tdp, limit, other)
    return UncappedRun(base.segments, duration, gpu_j, other, tdp, limit, "mean draw (no trace)")


def _trace_segments(
    trace: pd.DataFrame, run_id: int, budget: pd.DataFrame
) -> list[tuple[np.ndarray, np.ndarray]]:
    if trace.empty or budget.empty or pd.isna(budget.iloc[0].get("start_s")):
        return []
    start = float(budget.iloc[0]["start_s"])
    stop = start + float(budget.iloc[0]["duration_s"])
    rows = trace[
        (trace["run_id"] == run_id)
        & trace["component"].astype(str).str.startswith("gpu")
        & (trace["t_s"] >= start)
        & (trace["t_s"] <= stop)
    ].dropna(subset=["power_w"])
    segments = []
    for _, part in rows.sort_values("t_s").groupby("component"):
        t = part["t_s"].to_numpy(dtype=float)
        p = part["power_w"].to_numpy(dtype=float)
        if len(t) < 3:
            return []
        edges = np.concatenate([[start], (t[1:] + t[:-1]) / 2, [stop]])
        segments.append((np.diff(edges), p))
    return segments


# ---------------------------------------------------------------------------------------------
# Real profiles: reading, fitting, leave-one-file-out evaluation

_WINDOW = re.compile(r"_(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Profile:
    """One Zeus power-limit profile file: the same work at several limits (W per GPU)."""

    name: str
    limits_w: np.ndarray
    duration_s: np.ndarray
    gpu_energy_j: np.ndarray  # windows x GPUs

    @property
    def tdp_w(self) -> float:
        """The highest limit profiled: the GPU's default limit in these files."""
        return float(self.limits_w.max())

    def uncapped(self) -> UncappedRun:
        top = int(np.argmax(self.limits_w))
        return from_mean_draw(
            float(self.duration_s[top]), self.gpu_energy_j[top], self.tdp_w, self.tdp_w
        )


def read_profile(path: str | Path) -> Profile:
    """Read one ``<GPU>+<model>+gpu<ids>.csv`` profile (columns: window_name ending in the limit
    in W, elapsed_time s, gpuN_energy J)."""
    path = Path(path)
    try:
        table = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as error:
        raise DataError(f"profile {str(path)!r} cannot be read: {error}.") from None
    energy_columns = [c for c in table.columns if re.fullmatch(r"gpu\d+_energy", c)]
    if "window_name" not in table or "elapsed_time" not in table or not energy_columns:
        raise DataError(
            f"profile {str(path)!r} needs window_name, elapsed_time and gpuN_energy columns."
        )
    limits = []
    for name in table["window_name"].astype(str):
        match = _WINDOW.search(name)
        if match is None:
            raise DataError(f"profile {str(path)!r}: window {name!r} does not end in a limit.")
        limits.append(float(match.group(1)))
    return Profile(
        name=path.stem,
        limits_w=np.array(limits),
        duration_s=table["elapsed_time"].to_numpy(dtype=float),
        gpu_energy_j=table[energy_columns].to_numpy(dtype=float),
    )


def read_profiles(folder: str | Path) -> list[Profile]:
    """Every ``*.csv`` profile in ``folder`` (sorted by name); DataError when there is none."""
    folder = Path(folder)
    paths = sorted(folder.glob("*.csv"))
    if not paths:
        raise DataError(f"no profile CSV files in {str(folder)!r}.")
    return [read_profile(p) for p in paths]


def predict_mean_draw(
    law: CapLaw, draw_w: np.ndarray, duration_s: float, tdp_w: float, limits_w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``predict_limit`` for a run known by its per-GPU mean draws (W), at many limits at once:
    (durations s, GPU energies J). The same law, vectorised for fitting."""
    law = law.at_draw(float(np.mean(draw_w)) / tdp_w)
    draws = np.asarray(draw_w, dtype=float)[None, :, None]  # 1 x GPUs x 1
    levels = np.array([1 - law.spread, 1 + law.spread])[None, None, :]  # two-level stand-in
    power = draws * levels  # 1 x GPUs x 2
    limits = np.asarray(limits_w, dtype=float)[:, None, None]  # limits x 1 x 1
    target = law.draw_ratio * limits
    idle = law.idle_fraction * tdp_w
    capped = power > limits
    dynamic = np.clip((target - idle) / np.clip(power - idle, 1e-9, None), 1e-3, 1.0)
    stretch = np.where(capped, law.beta / dynamic ** (1.0 / law.alpha) + 1.0 - law.beta, 1.0)
    stretch = np.maximum(stretch, 1.0)
    drawn = np.where(capped, np.minimum(power, target), power)
    own = stretch.mean(axis=2)  # limits x GPUs (the two levels share the time equally)
    factor = own.max(axis=1)  # limits
    half = duration_s / 2
    energy = (half * stretch * drawn).sum(axis=2)  # limits x GPUs
    energy = energy + duration_s * (factor[:, None] - own) * power.min(axis=2)
    return duration_s * factor, energy.sum(axis=1)


def _profile_errors(law: CapLaw, profiles: Sequence[Profile]) -> np.ndarray:
    out = []
    for profile in profiles:
        top = int(np.argmax(profile.limits_w))
        duration = float(profile.duration_s[top])
        draws = profile.gpu_energy_j[top] / duration
        t, e = predict_mean_draw(law, draws, duration, profile.tdp_w, profile.limits_w)
        out.append(np.log(t / profile.duration_s))
        out.append(np.log(e / profile.gpu_energy_j.sum(axis=1)))
    return np.concatenate(out)


def fit_cap_law(
    profiles: Sequence[Profile], start: CapLaw = FIT_START, *, draw_sensitive: bool = False
) -> CapLaw:
    """Least squares on log time and log energy ratios over every window of ``profiles``.
    ``draw_sensitive`` also fits ``beta_per_draw`` (beta from the uncapped draw's share of TDP);
    otherwise it stays 0 (one beta for every run)."""
    from scipy.optimize import least_squares

    if not profiles:
        raise DataError("fitting the cap law needs at least one profile.")

    def law_of(theta: np.ndarray) -> CapLaw:
        v = [float(x) for x in theta]
        slope = v[5] if draw_sensitive else 0.0
        return CapLaw(v[0], v[1], v[2], v[3], v[4], beta_per_draw=slope)

    def residuals(theta: np.ndarray) -> np.ndarray:
        return _profile_errors(law_of(theta), profiles)

    x0 = [start.idle_fraction, start.alpha, start.beta, start.draw_ratio, start.spread]
    low, high = [0.0, 1.0, 0.0, 0.8, 0.0], [0.6, 8.0, 1.0, 1.05, 0.9]
    if draw_sensitive:
        x0, low, high = x0 + [start.beta_per_draw], low + [-3.0], high + [3.0]
    fit = least_squares(residuals, x0, bounds=(low, high), loss="soft_l1")
    return law_of(fit.x)


def monotone_time_ratios(limits_w: np.ndarray, time_ratios: np.ndarray) -> np.ndarray:
    """The closest (least squares) time ratios that never fall as the limit falls: a lower cap
    is never faster, which every physical law obeys. Pool-adjacent-violators, by limit."""
    order = np.argsort(-np.asarray(limits_w, dtype=float))  # highest limit first
    values = [float(v) for v in np.asarray(time_ratios, dtype=float)[order]]
    blocks: list[list[float]] = []  # [mean, count]
    for value in values:
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    pooled = np.concatenate([np.full(int(n), m) for m, n in blocks])
    out = np.empty_like(pooled)
    out[order] = pooled
    return out


@dataclass
class ProfileEvaluation:
    """Leave-one-file-out errors of the cap prediction, per window and summarised."""

    windows: pd.DataFrame  # file, limit_w, measured/predicted energy and time, region flags
    files: pd.DataFrame  # per file: region measured/predicted, errors
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "files": self.files.to_dict("records"),
            "windows": self.windows.to_dict("records"),
        }


REGION_PREDICTORS = {
    "cap_law": "cap law, beta from the uncapped draw's share of TDP (shipped)",
    "one_beta": "cap law, one beta for every run (before)",
    "never": 'constant "never in the region"',
    "monotone_ceiling": "in-sample ceiling: the file's own times made monotone (not a predictor)",
}


def region_scores(measured: pd.Series, predicted: pd.Series) -> dict[str, Any]:
    """True and false positives, precision and recall of region flags against the measured
    ones (precision is None when nothing was predicted in the region)."""
    m = measured.to_numpy(dtype=bool)
    p = predicted.to_numpy(dtype=bool)
    tp, fp = int(np.sum(m & p)), int(np.sum(~m & p))
    return {
        "true_positives": tp,
        "false_positives": fp,
        "measured_in_region": int(np.sum(m)),
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / int(np.sum(m)) if np.sum(m) else None,
    }


def evaluate_profiles(
    profiles: Sequence[Profile],
    *,
    min_saving: float = MIN_SAVING,
    max_slowdown: float = MAX_SLOWDOWN,
) -> ProfileEvaluation:
    """For each file: fit the law on the other files, predict every limit's energy and time
    and the operating region from the file's own highest-limit window, and compare with what
    the file measured. The "no change" baseline (energy and time as uncapped) is scored too,
    and the region is scored for four predictors (``REGION_PREDICTORS``): the shipped law, the
    law with a draw-dependent beta (also fitted on the other files), the constant "never", and
    an in-sample ceiling that no predictor can beat while obeying "a lower cap is never
    faster": the file's own measured times made monotone in the limit (``monotone_time_ratios``),
    each window keeping its measured mean power."""
    if len(profiles) < 2:
        raise DataError("leave-one-file-out needs at least two profiles.")
    rows, files = [], []
    for i, profile in enumerate(profiles):
        others = [p for j, p in enumerate(profiles) if j != i]
        law = fit_cap_law(others, draw_sensitive=True)
        one_beta = fit_cap_law(others)
        run = profile.uncapped()
        top = int(np.argmax(profile.limits_w))
        base_t = float(profile.duration_s[top])
        base_e = float(np.sum(profile.gpu_energy_j[top]))
        ratios = monotone_time_ratios(profile.limits_w, profile.duration_s / base_t)
        ratios = ratios / ratios[top]
        measured_region, predicted_region = [], []
        for k, (limit, duration, energies) in enumerate(
            zip(profile.limits_w, profile.duration_s, profile.gpu_energy_j, strict=True)
        ):
            if k == top:
                continue
            p = predict_limit(run, float(limit), law)
            q = predict_limit(run, float(limit), one_beta)
            energy = float(np.sum(energies))
            measured_in = region_flags(
                1 - energy / base_e, duration / base_t - 1, min_saving, max_slowdown
            )
            predicted_in = region_flags(p.saving, p.slowdown, min_saving, max_slowdown)
            ceiling_energy = energy / duration * ratios[k] * base_t  # measured W, monotone time
            ceiling_in = region_flags(
                1 - ceiling_energy / base_e, float(ratios[k]) - 1, min_saving, max_slowdown
            )
            if measured_in:
                measured_region.append(float(limit))
            if predicted_in:
                predicted_region.append(float(limit))
            rows.append(
                {
                    "file": profile.name,
                    "limit_w": float(limit),
                    "limit_over_draw": float(limit) / run.mean_draw_w,
                    "measured_energy_j": energy,
                    "predicted_energy_j": p.energy_j,
                    "measured_duration_s": float(duration),
                    "predicted_duration_s": p.duration_s,
                    "measured_saving": 1 - energy / base_e,
                    "measured_slowdown": float(duration) / base_t - 1,
                    "energy_error_percent": (p.energy_j / energy - 1) * 100,
                    "duration_error_percent": (p.duration_s / duration - 1) * 100,
                    "one_beta_energy_error_percent": (q.energy_j / energy - 1) * 100,
                    "one_beta_duration_error_percent": (q.duration_s / duration - 1) * 100,
                    "no_change_energy_error_percent": (base_e / energy - 1) * 100,
                    "no_change_duration_error_percent": (base_t / duration - 1) * 100,
                    "measured_in_region": measured_in,
                    "predicted_in_region": predicted_in,
                    "one_beta_in_region": region_flags(
                        q.saving, q.slowdown, min_saving, max_slowdown
                    ),
                    "never_in_region": False,
                    "monotone_ceiling_in_region": ceiling_in,
                    "case": p.case,
                }
            )
        files.append(
            {
                "file": profile.name,
                "mean_draw_w": run.mean_draw_w,
                "tdp_w": profile.tdp_w,
                "measured_region_w": sorted(measured_region),
                "predicted_region_w": sorted(predicted_region),
                "region_matches": sorted(measured_region) == sorted(predicted_region),
                "law": law.to_dict(),
                "one_beta_law": one_beta.to_dict(),
            }
        )
    windows = pd.DataFrame(rows)
    files_df = pd.DataFrame(files)

    def mape(column: str) -> float:
        return float(windows[column].abs().mean())

    agree = windows["measured_in_region"] == windows["predicted_in_region"]
    measured = windows["measured_in_region"]
    columns = {
        "cap_law": "predicted_in_region",
        "one_beta": "one_beta_in_region",
        "never": "never_in_region",
        "monotone_ceiling": "monotone_ceiling_in_region",
    }
    # physics says a cap never makes a GPU faster: windows that ran faster show the time noise
    faster = windows["measured_slowdown"][windows["measured_slowdown"] < 0]
    # a region window below a higher limit that measured more than max_slowdown slower: no law
    # in which a lower cap is never faster can put it in the region without noise
    contradicted = 0
    for _, part in windows.groupby("file"):
        for row in part[part["measured_in_region"]].itertuples():
            higher = part[part["limit_w"] > row.limit_w]
            contradicted += bool((higher["measured_slowdown"] > max_slowdown).any())
    summary = {
        "files": len(profiles),
        "windows": len(windows),
        "energy_mape_percent": mape("energy_error_percent"),
        "duration_mape_percent": mape("duration_error_percent"),
        "one_beta_energy_mape_percent": mape("one_beta_energy_error_percent"),
        "one_beta_duration_mape_percent": mape("one_beta_duration_error_percent"),
        "no_change_energy_mape_percent": mape("no_change_energy_error_percent"),
        "no_change_duration_mape_percent": mape("no_change_duration_error_percent"),
        "region_window_agreement": float(agree.mean()),
        "region_files_matching": int(files_df["region_matches"].sum()),
        "region": {
            name: {"predictor": REGION_PREDICTORS[name], **region_scores(measured, windows[col])}
            for name, col in columns.items()
        },
        "region_windows_contradicting_monotone_time": contradicted,
        "windows_faster_than_uncapped": int(len(faster)),
        "fastest_capped_window_percent": float(faster.min() * 100) if len(faster) else 0.0,
        "min_saving": min_saving,
        "max_slowdown": max_slowdown,
    }
    return ProfileEvaluation(windows, files_df, summary)


def evaluation_markdown(evaluation: ProfileEvaluation) -> str:
    """The leave-one-file-out evaluation as Markdown: errors, region scores, one row per file."""
    s = evaluation.summary
    lines = [
        "# Power-cap prediction, leave one profile file out",
        "",
        f"{s['files']} files, {s['windows']} capped windows; region = saves >= "
        f"{s['min_saving']:.0%} for <= {s['max_slowdown']:.0%} more time, against the file's "
        "highest-limit window.",
        "",
        "| | energy MAPE | time MAPE |",
        "| --- | ---: | ---: |",
        f"| cap law, beta from the draw | {s['energy_mape_percent']:.1f} % | "
        f"{s['duration_mape_percent']:.1f} % |",
        f"| cap law, one beta (before) | {s['one_beta_energy_mape_percent']:.1f} % | "
        f"{s['one_beta_duration_mape_percent']:.1f} % |",
        f"| no change (baseline) | {s['no_change_energy_mape_percent']:.1f} % | "
        f"{s['no_change_duration_mape_percent']:.1f} % |",
        "",
        f"Region: {s['region_window_agreement']:.0%} of windows classified as measured by the "
        f"cap law; {s['region_files_matching']} of {s['files']} files with the exact region.",
        "",
        "| region predictor | found | false positives | precision | recall |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for score in s["region"].values():
        lines.append(
            f"| {score['predictor']} | {score['true_positives']} of "
            f"{score['measured_in_region']} | {score['false_positives']} | "
            f"{_share(score['precision'])} | {_share(score['recall'])} |"
        )
    lines += [
        "",
        f"{s['windows_faster_than_uncapped']} of {s['windows']} capped windows ran faster than "
        f"their file's uncapped window (down to {s['fastest_capped_window_percent']:.1f} %), "
        "which no cap can cause: the time noise is as large as the region's 2 % threshold. "
        f"{s['region_windows_contradicting_monotone_time']} of the "
        f"{s['region']['never']['measured_in_region']} region windows lie below a higher limit "
        "of their file that measured more than the threshold slower: no law in which a lower "
        "cap is never faster can match both measurements.",
        "",
        "| file | draw W | TDP W | measured region W | predicted region W |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for row in evaluation.files.itertuples():
        lines.append(
            f"| {row.file} | {row.mean_draw_w:.0f} | {row.tdp_w:.0f} | "
            f"{_limits(row.measured_region_w)} | {_limits(row.predicted_region_w)} |"
        )
    return "\n".join(lines) + "\n"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _limits(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values) if values else "none"
