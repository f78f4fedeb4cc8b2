"""The statistics of ``wattlab compare``: is a candidate's energy (or time) per sample higher
than a baseline's, by how much, and could the data have seen it?

Method: Welch's t on the logarithms of the per-sample values of each repetition. The change is
``exp(mean(log c) - mean(log b))``, a ratio of geometric means; its standard error comes from
each side's scatter of repetitions (``s**2 / n`` each), plus, when the two sides were measured in
different sessions (another day, another card), a between-session term ``2 * session_sd**2``
that repetitions within a session cannot show. The interval's ends are one-sided bounds at
``confidence`` (so the interval is a two-sided ``2 * confidence - 1`` one), widened by the
counters' resolution of both sides, a bound on how far each side's mean could be off whatever
the repetitions say.

- regression: the lower bound is above 0 (an increase, at ``confidence``);
- improvement: the upper bound is below 0;
- no detectable change: the interval holds 0.

The gate (``exceeds``) fails on a regression whose upper bound reaches the threshold: an
increase is shown and the data cannot rule out that it is as large as the threshold. A
significant increase whose whole interval lies below the threshold passes, said so. With a true
change as large as the threshold and the repetitions :func:`reps_needed` asks for, the gate
fails with probability ``power`` (80 %); with no change, with probability at most
``1 - confidence`` (``bench/compare_power.py`` checks both by simulation on H200 noise).

Paired (``compare_paired``): when each baseline repetition has a candidate repetition run next
to it (two sides out of one sweep in the order ``abba``), the change is the mean of the pairs'
log differences, with their scatter (``s_d**2 / n``, ``n - 1`` degrees of freedom): a drift of
the machine that moves both runs of a pair alike drops out of each difference.

The smallest detectable change is the true change the gate catches with probability ``power``:
``(t(confidence) + t(power)) * se + resolution`` on the log scale.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

CONFIDENCE = 0.95  # one-sided: "higher, at 95 % confidence"
POWER = 0.80  # the chance of catching a change as large as the threshold
THRESHOLD = 0.05  # a 5 % increase fails the gate
MAX_REPS = 1000  # reps_needed gives up beyond this (None: not reachable)

Verdict = Literal["regression", "improvement", "no detectable change", "no interval"]
Method = Literal["welch", "paired"]


def _t_quantile(p: float, df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(p, df)) if math.isfinite(df) else float(stats.norm.ppf(p))


@dataclass(frozen=True)
class Change:
    """One metric of one configuration, candidate against baseline.

    ``ratio`` is candidate / baseline (geometric means of the per-sample values); ``low`` and
    ``high`` bound it at ``confidence`` each (NaN when no interval can be formed);
    ``detectable`` is the smallest change (a fraction, +0.07 = 7 %) these data catch with
    probability ``power``; ``reps_needed`` the repetitions per side that would make the
    threshold detectable (None when no number of repetitions reaches it, or without a spread to
    go by); ``why_no_interval`` says why there is none."""

    baseline_n: int
    candidate_n: int
    baseline_mean: float  # geometric mean per sample (J or s)
    candidate_mean: float
    ratio: float
    low: float
    high: float
    confidence: float
    verdict: Verdict
    exceeds: bool  # the gate: a regression that may reach the threshold
    threshold: float
    detectable: float
    reps_needed: int | None
    spread: float  # pooled standard deviation of log values (about a run's relative spread)
    session_sd: float  # the between-session term used (0: same session)
    resolution: float  # the counters' resolution bound added to the interval (a fraction)
    why_no_interval: str | None = None
    method: Method = "welch"  # paired: n pairs of runs, each baseline next to its candidate

    @property
    def change(self) -> float:
        """``ratio - 1``: +0.05 is 5 % more per sample."""
        return self.ratio - 1.0


def _log_values(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([float(v) for v in values], dtype="float64")
    return np.log(x[np.isfinite(x) & (x > 0)])


def _geomean(logs: np.ndarray) -> float:
    return float(math.exp(logs.mean())) if logs.size else math.nan


def welch_df(var_b: float, n_b: int, var_c: float, n_c: int) -> float:
    """Welch-Satterthwaite degrees of freedom of the two sides' variance terms (``s**2 / n``);
    ``n_b + n_c - 2`` when both are 0 (identical repetitions); a known term (the session's)
    adds to the numerator only, so it is left out here and by the caller."""
    terms = (var_b / n_b, var_c / n_c)
    denominator = terms[0] ** 2 / (n_b - 1) + terms[1] ** 2 / (n_c - 1)
    if denominator <= 0:
        return float(n_b + n_c - 2)
    return float(sum(terms) ** 2 / denominator)


def detectable_change(
    se: float,
    df: float,
    confidence: float = CONFIDENCE,
    power: float = POWER,
    resolution: float = 0.0,
) -> float:
    """The smallest true change (a fraction) caught with probability ``power`` when the log
    change's standard error is ``se`` with ``df`` degrees of freedom."""
    margin = (_t_quantile(confidence, df) + _t_quantile(power, df)) * se + resolution
    return math.expm1(margin)


def reps_needed(
    spread: float,
    threshold: float = THRESHOLD,
    *,
    confidence: float = CONFIDENCE,
    power: float = POWER,
    session_sd: float = 0.0,
    resolution: float = 0.0,
    max_reps: int = MAX_REPS,
    paired: bool = False,
) -> int | None:
    """The fewest repetitions per side (at least 2) that make a change of ``threshold``
    detectable, for runs whose log values scatter by ``spread`` (a standard deviation; paired:
    the pairs' differences' over the square root of 2, with ``n - 1`` degrees of freedom); None
    when ``max_reps`` do not reach it (a between-session term or the resolution is a floor that
    repetitions do not lower)."""
    if not (spread >= 0 and threshold > 0):
        return None
    target = math.log1p(threshold)
    floor_se = math.sqrt(2 * session_sd**2 + 2 * spread**2 / max_reps)
    if math.log1p(detectable_change(floor_se, math.inf, confidence, power, resolution)) > target:
        return None  # not even max_reps (with a normal quantile, the most hopeful) reach it
    for n in range(2, max_reps + 1):
        se = math.sqrt(2 * spread**2 / n + 2 * session_sd**2)
        df = n - 1 if paired else 2 * n - 2
        if math.log1p(detectable_change(se, df, confidence, power, resolution)) <= target:
            return n
    return None


def compare_values(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    power: float = POWER,
    session_sd: float = 0.0,
    resolution: float = 0.0,
    recommend: bool = True,
) -> Change:
    """Compare per-sample values (J or s per sample, one per repetition; positive and finite
    ones are used) of a candidate against a baseline (see the module docstring); without
    ``recommend``, ``reps_needed`` is left None (a simulation's many trials need no advice)."""
    lb, lc = _log_values(baseline), _log_values(candidate)
    n_b, n_c = int(lb.size), int(lc.size)
    mean_b, mean_c = _geomean(lb), _geomean(lc)
    ratio = mean_c / mean_b if n_b and n_c else math.nan
    made = functools.partial(
        Change,
        baseline_n=n_b,
        candidate_n=n_c,
        baseline_mean=mean_b,
        candidate_mean=mean_c,
        ratio=ratio,
        confidence=confidence,
        threshold=threshold,
        session_sd=session_sd,
        resolution=resolution,
    )
    if n_b < 2 or n_c < 2:
        few = [
            f"the {s} has {n} repetition{'s' if n != 1 else ''}"
            for s, n in (("baseline", n_b), ("candidate", n_c))
            if n < 2
        ]
        return made(
            low=math.nan,
            high=math.nan,
            verdict="no interval",
            exceeds=False,
            detectable=math.nan,
            reps_needed=None,
            spread=math.nan,
            why_no_interval=" and ".join(few) + ": no interval can be formed without a "
            "spread of repetitions (at least 2 per side)",
        )
    var_b, var_c = float(lb.var(ddof=1)), float(lc.var(ddof=1))
    spread = math.sqrt(((n_b - 1) * var_b + (n_c - 1) * var_c) / (n_b + n_c - 2))
    df = welch_df(var_b, n_b, var_c, n_c)
    se = math.sqrt(var_b / n_b + var_c / n_c + 2 * session_sd**2)
    d = float(lc.mean() - lb.mean())
    half = _t_quantile(confidence, df) * se + resolution
    low, high = d - half, d + half
    verdict: Verdict = (
        "regression" if low > 0 else "improvement" if high < 0 else "no detectable change"
    )
    return made(
        low=math.exp(low),
        high=math.exp(high),
        verdict=verdict,
        exceeds=verdict == "regression" and high >= math.log1p(threshold),
        detectable=detectable_change(se, df, confidence, power, resolution),
        reps_needed=None
        if not recommend
        else reps_needed(
            spread,
            threshold,
            confidence=confidence,
            power=power,
            session_sd=session_sd,
            resolution=resolution,
        ),
        spread=spread,
    )


def compare_paired(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    power: float = POWER,
    session_sd: float = 0.0,
    resolution: float = 0.0,
    recommend: bool = True,
) -> Change:
    """Compare paired per-sample values: ``baseline[i]`` ran next to ``candidate[i]`` (the same
    length; a pair with a value that is not positive and finite is left out). A paired t on the
    pairs' log differences (see the module docstring); the result's ``method`` is "paired", its
    ``spread`` the differences' standard deviation over the square root of 2 (a run's spread,
    when the pairs share their drift)."""
    if len(baseline) != len(candidate):
        raise ValueError("paired values need as many baseline values as candidate values")
    kept = [
        (math.log(float(b)), math.log(float(c)))
        for b, c in zip(baseline, candidate, strict=True)
        if all(math.isfinite(float(v)) and float(v) > 0 for v in (b, c))
    ]
    lb = np.asarray([b for b, _ in kept], dtype="float64")
    lc = np.asarray([c for _, c in kept], dtype="float64")
    n = len(kept)
    if n < 2:
        change = compare_values(
            [math.exp(v) for v in lb],
            [math.exp(v) for v in lc],
            threshold=threshold,
            confidence=confidence,
            session_sd=session_sd,
            resolution=resolution,
        )
        return dataclasses.replace(
            change,
            method="paired",
            why_no_interval=f"{n} pair{'s' if n != 1 else ''} of runs: no interval can be "
            "formed without a spread of pairs (at least 2)",
        )
    diffs = lc - lb
    sd = float(diffs.std(ddof=1))
    df = float(n - 1)
    se = math.sqrt(sd**2 / n + 2 * session_sd**2)
    d = float(diffs.mean())
    half = _t_quantile(confidence, df) * se + resolution
    low, high = d - half, d + half
    verdict: Verdict = (
        "regression" if low > 0 else "improvement" if high < 0 else "no detectable change"
    )
    spread = sd / math.sqrt(2)
    return Change(
        baseline_n=n,
        candidate_n=n,
        baseline_mean=_geomean(lb),
        candidate_mean=_geomean(lc),
        ratio=math.exp(d),
        low=math.exp(low),
        high=math.exp(high),
        confidence=confidence,
        verdict=verdict,
        exceeds=verdict == "regression" and high >= math.log1p(threshold),
        threshold=threshold,
        detectable=detectable_change(se, df, confidence, power, resolution),
        reps_needed=None
        if not recommend
        else reps_needed(
            spread,
            threshold,
            confidence=confidence,
            power=power,
            session_sd=session_sd,
            resolution=resolution,
            paired=True,
        ),
        spread=spread,
        session_sd=session_sd,
        resolution=resolution,
        method="paired",
    )


def sidak_confidence(confidence: float, tests: int) -> float:
    """The confidence each of ``tests`` comparisons needs so that together they raise a false
    alarm with probability at most ``1 - confidence`` (Sidak; independent comparisons)."""
    return confidence ** (1.0 / max(tests, 1))
