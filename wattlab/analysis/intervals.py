"""Intervals of the median that mean what they say.

The interval of a configuration's median is the distribution-free order-statistic interval
``[x_(k), x_(n+1-k)]`` of its n sorted runs. For continuous data it covers the true median
with probability ``1 - 2 * P(Binomial(n, 1/2) <= k - 1)``, whatever the distribution; ``k``
is the largest rank whose coverage is at least the level asked for (95 %).

Fewer runs cannot reach 95 %: with n = 2..5 even the widest choice, the range
``[min, max]`` (k = 1), covers the median only with probability 1 - 2^(1-n) (50 %, 75 %,
87.5 %, 93.75 %). Then the interval is the range, labelled ``"range"`` with its true
coverage; :data:`MIN_RUNS_FOR_95` (6) runs are needed for a 95 % interval.

A change ``median(x) / median(b) - 1`` gets the interval spanned by the two medians'
intervals, ``[lo_x / hi_b - 1, hi_x / lo_b - 1]``; both cover their medians at once with
probability ``coverage_x * coverage_b`` (independent runs), so that product is its stated
coverage (a lower bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

CI_LEVEL = 0.95
IntervalMethod = Literal["order-statistic", "range", "combined", "none"]


@dataclass(frozen=True)
class Interval:
    """An interval ``[low, high]`` (units of the values), the probability ``coverage`` (a
    fraction) that it holds the true value, and how it was made: ``"order-statistic"``
    (coverage >= the level asked for), ``"range"`` (min-max of too few runs for that level;
    coverage below it), ``"combined"`` (a change's interval from two medians' intervals) or
    ``"none"`` (fewer than two values: NaN bounds, coverage NaN)."""

    low: float
    high: float
    coverage: float
    method: IntervalMethod


NO_INTERVAL = Interval(math.nan, math.nan, math.nan, "none")


def rank_coverage(n: int, k: int) -> float:
    """Coverage of ``[x_(k), x_(n+1-k)]`` for the median of ``n`` continuous values:
    ``1 - 2 * P(Binomial(n, 1/2) <= k - 1)`` (a fraction)."""
    if n < 1 or not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"rank k must be in 1..{(n + 1) // 2} for n = {n}, got {k}.")
    tail = sum(math.comb(n, i) for i in range(k)) / 2**n  # whole numbers: no overflow
    return 1.0 - 2.0 * tail


def min_runs_for(level: float = CI_LEVEL) -> int:
    """The fewest runs whose range already covers the median with probability ``level``
    (6 for 95 %)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be a fraction in (0, 1), got {level}.")
    n = 2
    while rank_coverage(n, 1) < level:
        n += 1
    return n


MIN_RUNS_FOR_95 = min_runs_for(CI_LEVEL)


def median_interval(values: object, level: float = CI_LEVEL) -> Interval:
    """The order-statistic interval of the median of ``values`` (NaNs dropped); the range,
    labelled so, when there are too few values for ``level``; :data:`NO_INTERVAL` for fewer
    than two."""
    x = np.asarray(values, dtype="float64")
    x = np.sort(x[~np.isnan(x)])
    n = int(x.size)
    if n < 2:
        return NO_INTERVAL
    # the largest k whose coverage is >= level; the binomial tail is added up once, as
    # whole numbers (exact for any n: 2.0**n overflows past 1 023 runs)
    best_k, best_coverage = 0, math.nan
    total, term, tail = 2**n, 1, 0  # term = C(n, k - 1), tail = sum of C(n, i) for i < k
    for k in range(1, (n + 1) // 2 + 1):
        tail += term
        coverage = 1.0 - 2.0 * (tail / total)
        if coverage < level:
            break
        best_k, best_coverage = k, coverage
        term = term * (n - k + 1) // k
    if best_k == 0:
        return Interval(float(x[0]), float(x[-1]), rank_coverage(n, 1), "range")
    return Interval(float(x[best_k - 1]), float(x[n - best_k]), best_coverage,
                    "order-statistic")  # fmt: skip


def change_interval(values: object, reference_values: object, level: float = CI_LEVEL) -> Interval:
    """The interval of ``median(values) / median(reference_values) - 1`` (a fraction) spanned
    by the two medians' intervals; its coverage is the product of theirs. NO_INTERVAL when
    either side has fewer than two values or the reference interval reaches 0 or below."""
    a = median_interval(values, level)
    b = median_interval(reference_values, level)
    if a.method == "none" or b.method == "none" or b.low <= 0:
        return NO_INTERVAL
    coverage = a.coverage * b.coverage
    return Interval(a.low / b.high - 1.0, a.high / b.low - 1.0, coverage, "combined")
