"""The background sampler: a daemon thread that polls every meter each ``interval_s``, keeping
the power trace (and the integration and wrap tracking of the meters that need polling) and,
every ``utilization_interval_s``, the GPUs' utilisation readings."""

from __future__ import annotations

import math
import threading
import time

from wattlab.errors import ConfigError
from wattlab.meters.base import Meter

Sample = tuple[float, str, float]  # (t_s from the sampler's start, component, value)


class Sampler:
    """Args:
    interval_s: the polling period. Units: s.
    utilization_interval_s: how often to read the GPUs' utilisation; None reads none. Units: s.
    record_trace: keep the power samples (the meters are polled either way).
    """

    def __init__(
        self, interval_s: float, utilization_interval_s: float | None, record_trace: bool
    ) -> None:
        if not (
            isinstance(interval_s, (int, float)) and interval_s > 0 and math.isfinite(interval_s)
        ):
            raise ConfigError(
                f"the sampling interval must be a positive number of seconds, got {interval_s}."
            )
        if utilization_interval_s is not None and not (
            isinstance(utilization_interval_s, (int, float))
            and utilization_interval_s > 0
            and math.isfinite(utilization_interval_s)
        ):
            raise ConfigError(
                "the utilisation interval must be a positive number of seconds or None, got "
                f"{utilization_interval_s}."
            )
        self.interval_s = float(interval_s)
        self.utilization_interval_s = utilization_interval_s
        self.record_trace = record_trace
        self.trace: list[Sample] = []  # power, W
        self.utilization_trace: list[Sample] = []  # utilisation, percent
        self._meters: list[Meter] = []
        self._t_start = 0.0
        self._next_utilization_t = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, meters: list[Meter], t_start: float) -> None:
        """Poll once now, then every interval on a new thread, on a new timeline that starts at
        ``t_start`` (a ``time.perf_counter()`` value): the traces of an earlier run are
        dropped."""
        self._meters = meters
        with self._lock:
            self.trace = []  # a new timeline: old samples would fall inside the new windows
            self.utilization_trace = []
        self._next_utilization_t = 0.0
        self._t_start = t_start
        self._poll_all()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="wattlab-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; the traces stay readable until the next start()."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def between(self, t0_s: float, t1_s: float) -> tuple[list[Sample], list[Sample]]:
        """The power samples and utilisation readings from ``t0_s`` to ``t1_s`` (inclusive, on
        the sampler's timeline)."""
        with self._lock:
            samples = [s for s in self.trace if t0_s <= s[0] <= t1_s]
            readings = [u for u in self.utilization_trace if t0_s <= u[0] <= t1_s]
        return samples, readings

    def _poll_all(self) -> None:
        t = time.perf_counter() - self._t_start
        for meter in self._meters:
            try:
                meter.poll()
                power = meter.power_w() if self.record_trace else None
            except Exception:  # a flaky read must not kill the sampler; the gap shows
                continue
            if power is not None:
                with self._lock:
                    self.trace.append((t, meter.info.component, float(power)))
        if self.utilization_interval_s is not None and t >= self._next_utilization_t:
            self._next_utilization_t = t + self.utilization_interval_s
            self._read_utilization(t)

    def _read_utilization(self, t: float) -> None:
        for meter in self._meters:
            read = getattr(meter, "utilization_percent", None)
            if not callable(read):
                continue
            try:
                value = read()
            except Exception:  # unreadable now: the window's mean holds fewer readings
                continue
            if value is not None and math.isfinite(float(value)):
                with self._lock:
                    self.utilization_trace.append((t, meter.info.component, float(value)))

    def _run(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            next_t += self.interval_s
            self._poll_all()
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind (a slow read): skip, do not burst
                next_t = time.perf_counter()
                delay = 0.0
            self._stop.wait(delay)
