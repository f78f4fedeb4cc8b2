"""EnergyMonitor: named measurement windows over a set of meters, with a background sampler.

    from wattlab import EnergyMonitor

    with EnergyMonitor() as mon:            # discovers meters, starts the 100 ms sampler
        mon.begin_window("epoch-1")
        train_one_epoch()
        m = mon.end_window("epoch-1")       # waits for queued GPU work, then reads the meters
    print(m.total_energy_j, mon.result.co2e.value_kg)

A window's energy is the difference of two cumulative readings per meter. Opening and closing a
window first wait for the process's queued accelerator work (``torch.cuda.synchronize()`` when
torch has initialised CUDA, or the ``sync=`` callable), as Zeus does at both ends, so the energy
lands in the window that caused it: work queued before the window opened is not counted in it,
and work queued inside it is.
Windows may overlap and nest. A window shorter than a counter's update period is flagged and
bridged with instantaneous power, never reported as 0 J.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from wattlab.carbon import CarbonSettings, Co2e, joules_to_kwh, window_co2e
from wattlab.errors import ConfigError, WattlabError
from wattlab.meters.base import CPU, DRAM, GPU, RAM, Discovery, Meter, Provenance, weakest

DEFAULT_INTERVAL_S = 0.1
DEFAULT_UTILIZATION_INTERVAL_S = 0.5  # Green Algorithms sampled GPU utilisation every 0.5-1 s

F = TypeVar("F", bound=Callable[..., Any])


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _component_kind(component: str) -> str:
    """'gpu' for 'gpu:0' and for a host-qualified 'node-a/gpu:0' (multi-node runs)."""
    return component.split(":", 1)[0].rsplit("/", 1)[-1]


def cuda_sync_if_in_use() -> None:
    """Wait for this process's queued CUDA work, if torch is loaded and has used CUDA.

    Looks torch up in ``sys.modules`` so that the monitor never imports torch itself.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        cuda.synchronize()


@dataclass
class Measurement:
    """The energy of one window. Units are in the field names.

    ``energy_j`` holds every component (``gpu:0``, ``cpu:package-0``, ``dram:package-0``,
    ``psys:0``, ``cpu:estimated``, ``ram:estimated``); ``in_total`` says which of them add up to
    ``total_energy_j`` (a psys zone overlaps package + dram, so it is kept but not summed).
    """

    name: str
    started_at: str  # UTC ISO-8601
    duration_s: float
    energy_j: dict[str, float]
    provenance: dict[str, Provenance]
    uncertainty_j: dict[str, float]
    in_total: dict[str, bool]
    short_window: dict[str, bool] = field(default_factory=dict)
    samples: list[tuple[float, str, float]] = field(default_factory=list)  # (t_s, comp, W)
    idle_power_w: dict[str, float] = field(default_factory=dict)
    carbon: CarbonSettings = field(default_factory=CarbonSettings)
    start_offset_s: float = 0.0  # from the monitor's start
    # mean GPU utilisation (percent, 0-100) of each component that reports one, over the
    # sampler's utilisation readings inside the window, and how many readings that mean holds
    utilization_percent: dict[str, float] = field(default_factory=dict)
    utilization_readings: dict[str, int] = field(default_factory=dict)

    # --- totals -------------------------------------------------------------------------
    def _sum(self, kinds: tuple[str, ...]) -> float:
        return sum(
            e
            for c, e in self.energy_j.items()
            if self.in_total.get(c, True) and _component_kind(c) in kinds
        )

    @property
    def total_energy_j(self) -> float:
        return sum(e for c, e in self.energy_j.items() if self.in_total.get(c, True))

    @property
    def gpu_energy_j(self) -> float:
        return self._sum((GPU,))

    @property
    def cpu_energy_j(self) -> float:
        return self._sum((CPU,))

    @property
    def dram_energy_j(self) -> float:
        """DRAM counters, or the RAM estimate where there is none."""
        return self._sum((DRAM, RAM))

    @property
    def other_energy_j(self) -> float:
        """Summed components that are none of GPU, CPU, DRAM/RAM (not a residual of the
        total, which would leave rounding noise of +-1e-15 J behind)."""
        return sum(
            e
            for c, e in self.energy_j.items()
            if self.in_total.get(c, True) and _component_kind(c) not in (GPU, CPU, DRAM, RAM)
        )

    @property
    def total_provenance(self) -> Provenance:
        return weakest([p for c, p in self.provenance.items() if self.in_total.get(c, True)])

    def kind_provenance(self, kind: str) -> Provenance | None:
        kinds = (DRAM, RAM) if kind == DRAM else (kind,)
        found = [
            p
            for c, p in self.provenance.items()
            if _component_kind(c) in kinds and self.in_total.get(c, True)
        ]
        return weakest(found) if found else None

    @property
    def total_uncertainty_j(self) -> float:
        """Root-sum-square of the components' uncertainties (independent meters)."""
        return math.sqrt(
            sum(u * u for c, u in self.uncertainty_j.items() if self.in_total.get(c, True))
        )

    @property
    def mean_power_w(self) -> float:
        return self.total_energy_j / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def co2e(self) -> Co2e:
        return window_co2e(self)

    @property
    def idle_energy_j(self) -> float | None:
        """Energy the machine would have used idling for this long (needs an idle baseline)."""
        if not self.idle_power_w:
            return None
        return sum(
            p * self.duration_s
            for c, p in self.idle_power_w.items()
            if self.in_total.get(c, True) and c in self.energy_j
        )

    @property
    def dynamic_energy_j(self) -> float | None:
        idle = self.idle_energy_j
        return None if idle is None else self.total_energy_j - idle

    @property
    def is_short(self) -> bool:
        return any(self.short_window.values())

    def to_dict(self, include_samples: bool = False) -> dict[str, Any]:
        energy: dict[str, Any] = {"total": self.total_energy_j}
        energy.update(self.energy_j)
        data: dict[str, Any] = {
            "name": self.name,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "energy_j": energy,
            "energy_by_kind_j": {
                "gpu": self.gpu_energy_j,
                "cpu": self.cpu_energy_j,
                "dram": self.dram_energy_j,
                "other": self.other_energy_j,
            },
            "energy_kwh": joules_to_kwh(self.total_energy_j),
            "provenance": {
                "total": self.total_provenance.value,
                **{c: p.value for c, p in self.provenance.items()},
            },
            "uncertainty_j": {"total": self.total_uncertainty_j, **self.uncertainty_j},
            "in_total": dict(self.in_total),
            "short_window": {c: s for c, s in self.short_window.items() if s},
            "mean_power_w": self.mean_power_w,
            "co2e_kg": self.co2e.to_dict(),
        }
        if self.idle_power_w:
            data["idle_power_w"] = dict(self.idle_power_w)
            data["idle_energy_j"] = self.idle_energy_j
            data["dynamic_energy_j"] = self.dynamic_energy_j
        if self.utilization_percent:
            data["utilization_percent"] = dict(self.utilization_percent)
            data["utilization_readings"] = dict(self.utilization_readings)
        if include_samples:
            data["samples"] = [{"t_s": t, "component": c, "power_w": p} for t, c, p in self.samples]
        return data

    def gpu_utilization(self) -> tuple[float | None, int, int]:
        """(mean, readings, GPUs): the mean of the GPUs' sampled utilisation over the window
        (percent; each GPU weighted by its readings), how many readings it holds and from how
        many GPUs. The mean is None when no GPU reported a reading inside the window."""
        gpus = [c for c in self.utilization_percent if _component_kind(c) == "gpu"]
        readings = sum(self.utilization_readings.get(c, 0) for c in gpus)
        if not readings:
            return None, 0, 0
        weighted = sum(self.utilization_percent[c] * self.utilization_readings[c] for c in gpus)
        return weighted / readings, readings, len(gpus)


def combine_measurements(parts: list[Measurement], name: str | None = None) -> Measurement:
    """Sum measurements of the same window taken by different processes (DDP ranks).

    Each process must meter distinct components (its own GPU; CPU/DRAM on one process per
    host), so a component appearing twice is an error rather than a silent double count.
    The duration is the longest of the parts.
    """
    if not parts:
        raise ValueError("no measurements to combine")
    energy: dict[str, float] = {}
    prov: dict[str, Provenance] = {}
    unc: dict[str, float] = {}
    in_total: dict[str, bool] = {}
    short: dict[str, bool] = {}
    idle: dict[str, float] = {}
    samples: list[tuple[float, str, float]] = []
    utilization: dict[str, float] = {}
    readings: dict[str, int] = {}
    for part in parts:
        for comp, value in part.energy_j.items():
            if comp in energy:
                raise ValueError(f"component {comp} was metered by two processes")
            energy[comp] = value
            prov[comp] = part.provenance[comp]
            unc[comp] = part.uncertainty_j.get(comp, 0.0)
            in_total[comp] = part.in_total.get(comp, True)
            short[comp] = part.short_window.get(comp, False)
        idle.update(part.idle_power_w)
        samples.extend(part.samples)
        utilization.update(part.utilization_percent)
        readings.update(part.utilization_readings)
    samples.sort()
    first = min(parts, key=lambda p: p.started_at)
    return Measurement(
        name=name or first.name,
        started_at=first.started_at,
        duration_s=max(p.duration_s for p in parts),
        energy_j=energy,
        provenance=prov,
        uncertainty_j=unc,
        in_total=in_total,
        short_window=short,
        samples=samples,
        idle_power_w=idle,
        carbon=first.carbon,
        start_offset_s=first.start_offset_s,
        utilization_percent=utilization,
        utilization_readings=readings,
    )


@dataclass
class _OpenWindow:
    name: str
    started_at: str
    t0: float
    energy0_j: dict[str, float]
    power0_w: dict[str, float | None]
    sample_error0_j: dict[str, float]


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
            ``wattlab[prometheus]``); see ``wattlab.integrations.prometheus``.
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
        if not (
            isinstance(interval_s, (int, float)) and interval_s > 0 and math.isfinite(interval_s)
        ):
            raise ConfigError(
                f"the sampling interval must be a positive number of seconds, got {interval_s}."
            )
        self.interval_s = float(interval_s)
        if utilization_interval_s is not None and not (
            isinstance(utilization_interval_s, (int, float))
            and utilization_interval_s > 0
            and math.isfinite(utilization_interval_s)
        ):
            raise ConfigError(
                "the utilisation interval must be a positive number of seconds or None, got "
                f"{utilization_interval_s}."
            )
        self.utilization_interval_s = utilization_interval_s
        self._next_utilization_t = 0.0
        # (t_s from start, component, percent) of every utilisation reading
        self.utilization_trace: list[tuple[float, str, float]] = []
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
        self.record_trace = record_trace
        self._open: dict[str, _OpenWindow] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t_start: float | None = None
        self.trace: list[tuple[float, str, float]] = []
        self.idle_power_w: dict[str, float] = {}
        self.result: Measurement | None = None  # the whole-run window of a `with` block
        self.results: dict[str, Measurement] = {}  # the last result of each window name
        self._owns_meters = meters is None
        self.prometheus_port, self.prometheus_addr = prometheus_port, prometheus_addr
        self.exporter: Any = None  # the running Prometheus endpoint, if any

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
        with self._lock:
            self.trace = []  # a new timeline: old samples would fall inside the new windows
            self.utilization_trace = []
        self._next_utilization_t = 0.0
        self._t_start = time.perf_counter()
        self._poll_all()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run_sampler, name="wattlab-sampler", daemon=True
        )
        self._thread.start()
        if self.prometheus_port is not None:
            from wattlab.integrations.prometheus import PrometheusExporter

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
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
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

    # --- sampling -----------------------------------------------------------------------
    def _elapsed_s(self) -> float:
        assert self._t_start is not None
        return time.perf_counter() - self._t_start

    def _poll_all(self) -> None:
        t = self._elapsed_s()
        for meter in self.meters:
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
        for meter in self.meters:
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

    def _run_sampler(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            next_t += self.interval_s
            self._poll_all()
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind (a slow read): skip, do not burst
                next_t = time.perf_counter()
                delay = 0.0
            self._stop.wait(delay)

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
    def _read(self) -> tuple[dict[str, float], dict[str, float | None], dict[str, float]]:
        energy: dict[str, float] = {}
        power: dict[str, float | None] = {}
        sample_error: dict[str, float] = {}
        for meter in self.meters:
            comp = meter.info.component
            energy[comp] = float(meter.energy_j())
            try:
                power[comp] = meter.power_w()
            except Exception:
                power[comp] = None
            err_fn = getattr(meter, "sample_error_j", None)
            sample_error[comp] = float(err_fn()) if callable(err_fn) else 0.0
        return energy, power, sample_error

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
        energy, power, err = self._read()
        self._open[name] = _OpenWindow(name, started_at, time.perf_counter(), energy, power, err)

    def end_window(self, name: str, *, sync: bool = True) -> Measurement:
        """Close a window and return its Measurement (after waiting for queued GPU work)."""
        window = self._open.pop(name, None)
        if window is None:
            open_names = ", ".join(sorted(self._open)) or "none"
            raise WattlabError(f"window {name!r} is not open (open windows: {open_names}).")
        if sync and self._sync is not None:
            self._sync()
        t1 = time.perf_counter()
        energy1, power1, err1 = self._read()
        duration_s = max(t1 - window.t0, 0.0)
        energy: dict[str, float] = {}
        prov: dict[str, Provenance] = {}
        unc: dict[str, float] = {}
        in_total: dict[str, bool] = {}
        short: dict[str, bool] = {}
        for meter in self.meters:
            comp = meter.info.component
            info = meter.info
            delta_j = max(energy1[comp] - window.energy0_j.get(comp, energy1[comp]), 0.0)
            p0, p1 = window.power0_w.get(comp), power1.get(comp)
            powers = [p for p in (p0, p1) if p is not None]
            inst_power_w = sum(powers) / len(powers) if powers else None
            provenance = info.provenance
            is_short = info.provenance == Provenance.MEASURED and duration_s < info.update_period_s
            if is_short and inst_power_w is not None:
                # The counter may not have ticked inside the window: bridge with power.
                delta_j = inst_power_w * duration_s
                provenance = Provenance.SAMPLED
            mean_power_w = delta_j / duration_s if duration_s > 0 else (inst_power_w or 0.0)
            if info.provenance == Provenance.MEASURED:
                # about one counter update period of power at each end of the window
                edge_w = (p0 if p0 is not None else mean_power_w) + (
                    p1 if p1 is not None else mean_power_w
                )
                uncertainty = info.update_period_s * edge_w
                if is_short:
                    uncertainty = max(uncertainty, delta_j)
            elif info.provenance == Provenance.SAMPLED:
                bracket = max(err1.get(comp, 0.0) - window.sample_error0_j.get(comp, 0.0), 0.0)
                # plus half an interval of power at each end (the window edges fall between
                # samples)
                uncertainty = bracket + self.interval_s * mean_power_w
            else:
                uncertainty = meter.relative_uncertainty() * delta_j
            energy[comp] = delta_j
            prov[comp] = provenance
            unc[comp] = uncertainty
            in_total[comp] = bool(info.details.get("in_total", True))
            short[comp] = is_short
        t0_off = window.t0 - (self._t_start or window.t0)
        with self._lock:
            samples = [s for s in self.trace if t0_off <= s[0] <= t0_off + duration_s]
            readings = [u for u in self.utilization_trace if t0_off <= u[0] <= t0_off + duration_s]
        by_component: dict[str, list[float]] = {}
        for _, comp, percent in readings:
            by_component.setdefault(comp, []).append(percent)
        result = Measurement(
            name=name,
            started_at=window.started_at,
            duration_s=duration_s,
            energy_j=energy,
            provenance=prov,
            uncertainty_j=unc,
            in_total=in_total,
            short_window=short,
            samples=samples,
            idle_power_w=dict(self.idle_power_w),
            carbon=self.carbon,
            start_offset_s=t0_off,
            utilization_percent={c: sum(v) / len(v) for c, v in by_component.items()},
            utilization_readings={c: len(v) for c, v in by_component.items()},
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
        return {n: (now - w.t0, dict(w.energy0_j)) for n, w in list(self._open.items())}
