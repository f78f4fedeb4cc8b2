"""Whether a run's "idle" GPU reading was the card at rest or the previous run's tail.

Each GPU run stores the GPU's power and temperature read just before it starts
(``idle_power_w``). With no cool-down between runs that reading comes a moment after the
previous run ended: NVML's power is an average over the last second or so and the clocks come
down over seconds, so it shows the previous run's tail (248-256 W on an H100 that drew 70 W at
rest, docs/compare.md). So the statement and ``compare`` call it the power read just before the
run, never idle power, and say how many readings came less than ``SETTLED_AFTER_S`` seconds
after a stored run of the same host had ended. A sweep's untimed warm-up runs are not stored,
so that count is a floor.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

SETTLED_AFTER_S = 10.0  # a reading this long after the previous run's end counts as at rest


@dataclass(frozen=True)
class RunSpan:
    """One run's host, start and end (UTC ISO-8601 as stored; None when not recorded)."""

    hostname: str | None
    started_at: str | None
    finished_at: str | None


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        moment = dt.datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


def unsettled_readings(
    read: Iterable[RunSpan],
    others: Iterable[RunSpan] | None = None,
    settled_after_s: float = SETTLED_AFTER_S,
) -> int:
    """How many runs of ``read`` (the runs with a reading) started less than ``settled_after_s``
    after a run of ``others`` (default: ``read`` itself) on the same host had ended: their
    reading before the run is not the card at rest. Only the runs given are known (one that
    came before them is not), so this is a floor. O(n log n): each host's ends sorted once.
    """
    readers = list(read)
    ends: dict[str | None, list[float]] = {}
    for run in readers if others is None else others:
        end = _seconds(run.finished_at)
        if end is not None:
            ends.setdefault(run.hostname, []).append(end)
    for sorted_ends in ends.values():
        sorted_ends.sort()  # then the last end at or before a start is one bisection away
    count = 0
    for run in readers:
        start = _seconds(run.started_at)
        host_ends = ends.get(run.hostname)
        if start is None or not host_ends:
            continue
        i = bisect.bisect_right(host_ends, start)
        if i and start - host_ends[i - 1] < settled_after_s:
            count += 1
    return count


__all__ = ["SETTLED_AFTER_S", "RunSpan", "unsettled_readings"]
