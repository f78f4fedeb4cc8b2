"""EnergyMonitor: named measurement windows over a set of meters, with a background sampler.

    from wattlab import EnergyMonitor

    with EnergyMonitor() as mon:            # discovers meters, starts the 100 ms sampler
        mon.begin_window("epoch-1")
        train_one_epoch()
        m = mon.end_window("epoch-1")       # waits for queued GPU work, then reads the meters
    print(m.total_energy_j, mon.result.co2e.value_kg)

Opening and closing a window first wait for the process's queued accelerator work
(``torch.cuda.synchronize()`` when torch has initialised CUDA, or the ``sync=`` callable), as Zeus
does at both ends, so the energy lands in the window that caused it: work queued before the
window opened is not counted in it, and work queued inside it is. Windows may overlap and nest;
their arithmetic is in ``windows.py``, the sampler in ``sampler.py``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from wattlab.errors import ConfigError, WattlabError
from wattlab.meters.base import Discovery, Meter
from wattlab.monitor.carbon import CarbonSettings
from wattlab.monitor.clock import cuda_sync_if_in_use, utc_now_iso
from wattlab.monitor.measurement import Measurement
from wattlab.monitor.sampler import Sample, Sampler
from wattlab.monitor.windows import OpenWindow, mean_utilization, read_edge, window_energy

DEFAULT_INTERVAL_S = 0.1
DEFAULT_UTILIZATION_INTERVAL_S = 0.5  # Green Algorithms sampled GPU utilisation every 0.5-1 s

F = TypeVar("F", bound=Callable[..., Any])


class WindowHandle:
    """What ``EnergyMonitor.window()`` yields; ``result`` is set when the block exits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.result: Measurement | None = None


class EnergyMonitor:
    """Measure energy over named windows. Start it (or use ``with``) before opening windows.

    Args:
        meters: meters to read, or a Discovery; None discovers this machine's meters on start.
        interval_s: the background sampler's period (power trace, integration of power-only
            meters, RAPL wrap tracking). Units: s. Default 0.1.
        sync: called before a window opens and before it closes, to wait for queued
            accelerator work; "auto" calls ``torch.cuda.synchronize()`` when torch has
            initialised CUDA; None disables it.
        carbon: intensity and PUE for the CO2e of each result.
        record_trace: keep the power samples (for plots and the store).
        utilization_interval_s: how often the sampler reads the GPUs' utilisation (NVML's
            ``gpu`` rate, itself averaged over 1/6-1 s); each window reports the mean of the
            readings inside it (``Measurement.utilization_percent``). Units: s. Default 0.5,
            the period Green Algorithms' authors sampled at; None reads none.
        discover_kwargs: passed to ``discover_meters`` when meters is None.
        prometheus_port: serve /metrics on this port while started (0 = any free port; needs
            ``wattlab[prometheus]``); see ``wattlab.monitor.prometheus``.
        prometheus_addr: the address to serve it on (loopback unless you open it up).
    """

    def __init__(
        self,
        meters: list[Meter] | Discovery | None = None,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        sync: Callable[[], None] | str | None = "auto",
        carbon: CarbonSettings | None = None,
        record_trace: bool = True,
        utilization_interval_s: float | None = DEFAULT_UTILIZATION_INTERVAL_S,
        discover_kwargs: dict[str, Any] | None = None,
        prometheus_port: int | None = None,
        prometheus_addr: str = "127.0.0.1",
    ) -> None:
        self._sampler = Sampler(interval_s, utilization_interval_s, record_trace)
        self._given_meters = meters
        self._discover_kwargs = discover_kwargs or {}
        self.discovery: Discovery | None = meters if isinstance(meters, Discovery) else None
        self.meters: list[Meter] = list(
            meters.meters if isinstance(meters, Discovery) else meters or []
        )
        if sync == "auto":
            self._sync: Callable[[], None] | None = cuda_sync_if_in_use
        elif sync is None or callable(sync):
            self._sync = sync
        else:
            raise ConfigError(f"sync must be 'auto', None or a callable, got {sync!r}.")
        self.carbon = carbon or CarbonSettings()
        self._open: dict[str, OpenWindow] = {}
        self._t_start: float | None = None
        self.idle_power_w: dict[str, float] = {}
        self.result: Measurement | None = None  # the whole-run window of a `with` block
        self.results: dict[str, Measurement] = {}  # the last result of each window name
        self._owns_meters = meters is None
        self.prometheus_port, self.prometheus_addr = prometheus_port, prometheus_addr
        self.exporter: Any = None  # the running Prometheus endpoint, if any

    # --- the sampler's settings and traces ------------------------------------------------
    @property
    def interval_s(self) -> float:
        return self._sampler.interval_s

    @property
    def utilization_interval_s(self) -> float | None:
        return self._sampler.utilization_interval_s

    @property
    def record_trace(self) -> bool:
        return self._sampler.record_trace

    @property
    def trace(self) -> list[Sample]:
        """(t_s from start, component, W) of every power sample of the current (or last)
        start()/stop() session."""
        return self._sampler.trace

    @property
    def utilization_trace(self) -> list[Sample]:
        """(t_s from start, component, percent) of every utilisation reading."""
        return self._sampler.utilization_trace

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._t_start is not None

    def start(self) -> EnergyMonitor:
        """Open the meters (discovering them when none were given) and start the sampler on a
        new timeline: the power trace of an earlier start()/stop() session is dropped."""
        if self.started:
            return self
        if self._given_meters is None:
            from wattlab.meters.discover import discover_meters

            self.discovery = discover_meters(**self._discover_kwargs)
            self.meters = list(self.discovery.meters)
        self._t_start = time.perf_counter()
        self._sampler.start(self.meters, self._t_start)
        if self.prometheus_port is not None:
            from wattlab.monitor.prometheus import PrometheusExporter

            try:
                self.exporter = PrometheusExporter(self, self.prometheus_port, self.prometheus_addr)
            except BaseException:
                self.stop()
                raise
        return self

    def stop(self) -> None:
        """Stop the sampler and close owned meters. ``trace`` and ``results`` stay readable
        until the next start()."""
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        self._sampler.stop()
        if self._owns_meters and self.discovery is not None:
            self.discovery.close()
        self._t_start = None  # a later start() opens fresh meters and a new timeline
        self._open.clear()

    def __enter__(self) -> EnergyMonitor:
        self.start()
        self.begin_window("__total__")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if "__total__" in self._open:
                result = self.end_window("__total__")
                result.name = "total"
                self.result = result
        finally:
            self.stop()

    # --- idle baseline ------------------------------------------------------------------
    def measure_idle(self, duration_s: float = 5.0) -> dict[str, float]:
        """Measure each component's mean power while nothing runs, for idle/dynamic splits."""
        if duration_s <= 0:
            raise ConfigError(f"the idle baseline needs a positive duration, got {duration_s}.")
        self.start()
        name = "__idle__"
        self.begin_window(name)
        time.sleep(duration_s)
        m = self.end_window(name)
        self.idle_power_w = {c: e / m.duration_s for c, e in m.energy_j.items()}
        return dict(self.idle_power_w)

    # --- windows ------------------------------------------------------------------------
    def begin_window(self, name: str, *, sync: bool = True) -> None:
        """Open a window (after waiting for queued GPU work, unless ``sync`` is False). Names
        are unique among open windows; overlapping is allowed."""
        if not self.started:
            raise WattlabError("start the EnergyMonitor (or use it in a `with` block) first.")
        if name in self._open:
            raise WattlabError(f"window {name!r} is already open; close it before reopening.")
        if sync and self._sync is not None:
            self._sync()
        started_at = utc_now_iso()
        start = read_edge(self.meters)
        self._open[name] = OpenWindow(name, started_at, time.perf_counter(), start)

    def end_window(self, name: str, *, sync: bool = True) -> Measurement:
        """Close a window and return its Measurement (after waiting for queued GPU work)."""
        window = self._open.pop(name, None)
        if window is None:
            open_names = ", ".join(sorted(self._open)) or "none"
            raise WattlabError(f"window {name!r} is not open (open windows: {open_names}).")
        if sync and self._sync is not None:
            self._sync()
        t1 = time.perf_counter()
        end = read_edge(self.meters)
        duration_s = max(t1 - window.t0, 0.0)
        energy = window_energy(self.meters, window.start, end, duration_s, self.interval_s)
        t0_off = window.t0 - (self._t_start or window.t0)
        samples, readings = self._sampler.between(t0_off, t0_off + duration_s)
        utilization_percent, utilization_readings = mean_utilization(readings)
        result = Measurement(
            name=name,
            started_at=window.started_at,
            duration_s=duration_s,
            energy_j=energy.energy_j,
            provenance=energy.provenance,
            uncertainty_j=energy.uncertainty_j,
            in_total=energy.in_total,
            short_window=energy.short_window,
            samples=samples,
            idle_power_w=dict(self.idle_power_w),
            carbon=self.carbon,
            start_offset_s=t0_off,
            utilization_percent=utilization_percent,
            utilization_readings=utilization_readings,
        )
        self.results[name] = result
        return result

    @contextmanager
    def window(self, name: str) -> Iterator[WindowHandle]:
        """``with mon.window("eval") as w: ...`` then ``w.result`` is the Measurement."""
        handle = WindowHandle(name)
        self.begin_window(name)
        try:
            yield handle
        finally:
            handle.result = self.end_window(name)

    def measure(self, name: str | None = None) -> Callable[[F], F]:
        """Decorator: each call of the function is a window (its result in ``results``)."""

        def decorate(fn: F) -> F:
            window_name = name or fn.__name__

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.start()
                with self.window(window_name):
                    return fn(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorate

    def open_windows(self) -> dict[str, tuple[float, dict[str, float]]]:
        """Each open window's elapsed seconds and cumulative energy per component at its start."""
        now = time.perf_counter()
        return {n: (now - w.t0, dict(w.start.energy_j)) for n, w in list(self._open.items())}
