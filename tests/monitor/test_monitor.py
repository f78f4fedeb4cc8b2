"""EnergyMonitor against scripted meters: windows, overlap, short windows, uncertainty."""

from __future__ import annotations

import threading
import time

import pytest

from wattlab.errors import ConfigError, WattlabError
from wattlab.meters.base import MeterInfo, Provenance
from wattlab.monitor import EnergyMonitor, combine_measurements
from wattlab.monitor.carbon import CarbonSettings


class ClockMeter:
    """A counter meter whose power is constant: energy = power x elapsed time, quantised to
    the counter's update period like NVML's (it only changes every `period_s`)."""

    def __init__(self, component: str, power_w: float, period_s: float = 0.0, prov=None):
        self.power = power_w
        self.period_s = period_s
        self.t0 = time.perf_counter()
        self.polls = 0
        self.lock = threading.Lock()
        self.info = MeterInfo(
            component=component,
            kind=component.split(":")[0],
            provenance=prov or Provenance.MEASURED,
            source="test",
            description="constant power",
            update_period_s=period_s,
            details={"in_total": not component.startswith("psys")},
        )

    def energy_j(self) -> float:
        elapsed = time.perf_counter() - self.t0
        if self.period_s:
            elapsed = (elapsed // self.period_s) * self.period_s
        return self.power * elapsed

    def power_w(self) -> float:
        return self.power

    def poll(self) -> None:
        with self.lock:
            self.polls += 1

    def relative_uncertainty(self) -> float:
        return 0.4 if self.info.provenance == Provenance.ESTIMATED else 0.0

    def close(self) -> None:
        pass


def test_window_energy_is_power_times_duration():
    gpu = ClockMeter("gpu:0", 200.0)
    cpu = ClockMeter("cpu:package-0", 50.0)
    with EnergyMonitor([gpu, cpu], interval_s=0.01, sync=None) as mon:
        mon.begin_window("a")
        time.sleep(0.2)
        m = mon.end_window("a")
    assert m.energy_j["gpu:0"] == pytest.approx(200.0 * m.duration_s, rel=0.02)
    assert m.total_energy_j == pytest.approx(250.0 * m.duration_s, rel=0.02)
    assert m.gpu_energy_j == pytest.approx(m.energy_j["gpu:0"])
    assert m.cpu_energy_j == pytest.approx(m.energy_j["cpu:package-0"])
    assert m.total_provenance == Provenance.MEASURED
    assert gpu.polls >= 5  # the sampler ran
    assert mon.result is not None and mon.result.duration_s >= m.duration_s
    # the trace has samples of both components inside the window
    assert {c for _, c, _ in m.samples} == {"gpu:0", "cpu:package-0"}


def test_overlapping_windows_and_errors():
    meter = ClockMeter("gpu:0", 100.0)
    mon = EnergyMonitor([meter], interval_s=0.05, sync=None)
    with pytest.raises(WattlabError, match="start the EnergyMonitor"):
        mon.begin_window("x")
    mon.start()
    try:
        mon.begin_window("outer")
        time.sleep(0.05)
        mon.begin_window("inner")
        with pytest.raises(WattlabError, match="already open"):
            mon.begin_window("inner")
        time.sleep(0.1)
        inner = mon.end_window("inner")
        outer = mon.end_window("outer")
        with pytest.raises(WattlabError, match="not open"):
            mon.end_window("inner")
    finally:
        mon.stop()
    assert outer.energy_j["gpu:0"] > inner.energy_j["gpu:0"] > 0


def test_sync_runs_before_reading():
    calls = []
    meter = ClockMeter("gpu:0", 100.0)
    with EnergyMonitor([meter], interval_s=0.05, sync=lambda: calls.append(1)) as mon:
        with mon.window("w") as handle:
            pass
    assert handle.result is not None
    assert len(calls) == 4  # both ends of the window and of the monitor's whole-run window


def test_short_window_is_flagged_and_bridged_not_zero():
    # counter updates every 0.5 s; a 20 ms window would read 0 J from the counter alone
    meter = ClockMeter("gpu:0", 300.0, period_s=0.5)
    with EnergyMonitor([meter], interval_s=0.05, sync=None) as mon:
        mon.begin_window("short")
        time.sleep(0.02)
        m = mon.end_window("short")
    assert m.short_window["gpu:0"] is True
    assert m.energy_j["gpu:0"] == pytest.approx(300.0 * m.duration_s, rel=1e-6)
    assert m.provenance["gpu:0"] == Provenance.SAMPLED
    assert m.to_dict()["short_window"] == {"gpu:0": True}


def test_uncertainty_per_provenance():
    counter = ClockMeter("gpu:0", 100.0, period_s=0.01)
    est = ClockMeter("cpu:estimated", 40.0, prov=Provenance.ESTIMATED)
    with EnergyMonitor([counter, est], interval_s=0.05, sync=None) as mon:
        mon.begin_window("w")
        time.sleep(0.1)
        m = mon.end_window("w")
    # counter: one update period of power at each end
    assert m.uncertainty_j["gpu:0"] == pytest.approx(0.01 * 200.0)
    # estimate: the model's stated relative range
    assert m.uncertainty_j["cpu:estimated"] == pytest.approx(0.4 * m.energy_j["cpu:estimated"])
    assert m.total_provenance == Provenance.ESTIMATED
    assert m.kind_provenance("gpu") == Provenance.MEASURED


def test_psys_is_kept_but_not_summed():
    pkg = ClockMeter("cpu:package-0", 50.0)
    psys = ClockMeter("psys:0", 80.0)
    with EnergyMonitor([pkg, psys], interval_s=0.05, sync=None) as mon, mon.window("w") as h:
        time.sleep(0.05)
    m = h.result
    assert m.energy_j["psys:0"] > 0
    assert m.total_energy_j == pytest.approx(m.energy_j["cpu:package-0"])


def test_co2e_uses_settings():
    meter = ClockMeter("gpu:0", 100.0)
    settings = CarbonSettings(0.4, 0.2, 0.6, pue=1.5)
    with EnergyMonitor([meter], interval_s=0.05, sync=None, carbon=settings) as mon:
        time.sleep(0.05)
    m = mon.result
    kwh = m.total_energy_j / 3.6e6
    assert m.co2e.value_kg == pytest.approx(kwh * 1.5 * 0.4)
    assert m.co2e.low_kg == pytest.approx(kwh * 1.5 * 0.2)
    d = m.to_dict()
    assert d["co2e_kg"]["high"] == pytest.approx(kwh * 1.5 * 0.6)
    assert d["energy_j"]["total"] == pytest.approx(m.total_energy_j)


def test_decorator_and_idle_baseline():
    meter = ClockMeter("gpu:0", 60.0)
    mon = EnergyMonitor([meter], interval_s=0.02, sync=None)

    @mon.measure()
    def work():
        time.sleep(0.05)
        return 7

    try:
        idle = mon.measure_idle(0.1)
        assert idle["gpu:0"] == pytest.approx(60.0, rel=0.05)
        assert work() == 7
    finally:
        mon.stop()
    m = mon.results["work"]
    assert m.idle_energy_j == pytest.approx(60.0 * m.duration_s, rel=0.05)
    assert abs(m.dynamic_energy_j) < 0.05 * m.total_energy_j


def test_combine_sums_ranks_and_refuses_double_count():
    a = ClockMeter("gpu:0", 100.0)
    b = ClockMeter("gpu:1", 100.0)
    with EnergyMonitor([a], interval_s=0.05, sync=None) as m1:
        time.sleep(0.05)
    with EnergyMonitor([b], interval_s=0.05, sync=None) as m2:
        time.sleep(0.05)
    both = combine_measurements([m1.result, m2.result])
    assert both.gpu_energy_j == pytest.approx(m1.result.total_energy_j + m2.result.total_energy_j)
    with pytest.raises(ValueError, match="two processes"):
        combine_measurements([m1.result, m1.result])


def test_bad_interval():
    with pytest.raises(ConfigError, match="positive"):
        EnergyMonitor([], interval_s=-1)


def test_a_stopped_monitor_starts_again_with_fresh_meters():
    made = []

    def fresh() -> list:
        meter = ClockMeter("gpu:0", 100.0)
        made.append(meter)
        return meter

    from wattlab.meters.base import Discovery

    mon = EnergyMonitor([fresh()], interval_s=0.02, sync=None)
    for _ in range(2):
        mon.start()
        with mon.window("w") as h:
            time.sleep(0.05)
        mon.stop()
        assert h.result.energy_j["gpu:0"] == pytest.approx(100.0 * h.result.duration_s, rel=0.05)
    assert not mon.started
    # an owned discovery is re-opened on each start
    mon = EnergyMonitor(interval_s=0.02, sync=None, discover_kwargs={})
    mon._given_meters = None
    import wattlab.meters.discover as discover

    original = discover.discover_meters
    discover.discover_meters = lambda **_: Discovery([fresh()], [])
    try:
        energies = []
        for _ in range(2):
            mon.start()
            with mon.window("w") as h:
                time.sleep(0.05)
            mon.stop()
            energies.append(h.result.energy_j["gpu:0"])
    finally:
        discover.discover_meters = original
    assert all(e > 0 for e in energies)
    assert len(made) == 3


class QueuedWorkMeter:
    """A GPU counter that only sees work once it has run: ``queue(j)`` adds work that lands in
    the counter when ``sync()`` is called (as torch.cuda.synchronize() waits for it)."""

    def __init__(self) -> None:
        self.counted_j = 0.0
        self.queued_j = 0.0
        self.events: list[str] = []
        self.info = MeterInfo("gpu:0", "gpu", Provenance.MEASURED, "test", "queued", 0.0)

    def queue(self, energy_j: float) -> None:
        self.queued_j += energy_j

    def sync(self) -> None:
        self.events.append("sync")
        self.counted_j += self.queued_j
        self.queued_j = 0.0

    def energy_j(self) -> float:
        self.events.append("read")
        return self.counted_j

    def power_w(self) -> float:
        return 1.0

    def poll(self) -> None:
        pass

    def relative_uncertainty(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("sync_at_start", "expected_j"), [(True, 30.0), (False, 80.0)])
def test_begin_window_waits_for_queued_work_unless_told_not_to(sync_at_start, expected_j):
    gpu = QueuedWorkMeter()
    mon = EnergyMonitor([gpu], interval_s=10.0, sync=gpu.sync).start()
    try:
        gpu.queue(50.0)  # queued before the window: belongs to whatever came before
        gpu.events.clear()
        mon.begin_window("w", sync=sync_at_start)
        assert gpu.events[:2] == (["sync", "read"] if sync_at_start else ["read"])
        gpu.queue(30.0)  # queued inside the window
        m = mon.end_window("w")
    finally:
        mon.stop()
    assert m.energy_j["gpu:0"] == pytest.approx(expected_j)


def test_a_restarted_monitor_forgets_the_old_power_trace():
    meter = ClockMeter("gpu:0", 100.0)
    mon = EnergyMonitor([meter], interval_s=0.01, sync=None)
    mon.start()
    time.sleep(0.3)
    mon.stop()
    assert {p for _, _, p in mon.trace} == {100.0}  # still readable after stop()
    meter.power = 500.0
    mon.start()
    try:
        with mon.window("second") as h:
            time.sleep(0.1)
    finally:
        mon.stop()
    # the first session's samples (offsets 0-0.3 s) would fall inside this window's offsets
    assert h.result.samples
    assert {p for _, _, p in h.result.samples} == {500.0}
    assert {p for _, _, p in mon.trace} == {500.0}


def test_dead_helpers_are_gone():
    from wattlab.monitor import Measurement

    assert not hasattr(Measurement, "gpu_energy_by_index_j")
    assert not hasattr(EnergyMonitor, "trace_between")


class BusyGpuMeter(ClockMeter):
    """A GPU that reports `busy` percent utilisation until `idle_after_s`, then 0 %."""

    def __init__(self, component: str, busy: float, idle_after_s: float) -> None:
        super().__init__(component, 300.0)
        self.busy, self.idle_after_s = busy, idle_after_s
        self.reads = 0

    def utilization_percent(self) -> float:
        self.reads += 1
        return self.busy if time.perf_counter() - self.t0 < self.idle_after_s else 0.0


def test_the_sampler_reads_utilisation_and_each_window_gets_its_own_mean():
    gpu = BusyGpuMeter("gpu:0", busy=80.0, idle_after_s=0.35)
    cpu = ClockMeter("cpu:package-0", 50.0)
    mon = EnergyMonitor([gpu, cpu], interval_s=0.01, utilization_interval_s=0.05, sync=None)
    with mon:
        mon.begin_window("both")
        mon.begin_window("busy")
        time.sleep(0.25)
        busy = mon.end_window("busy")
        time.sleep(0.35)  # the GPU goes idle at 0.35 s
        mon.begin_window("idle")
        time.sleep(0.2)
        idle = mon.end_window("idle")
        both = mon.end_window("both")
    assert busy.utilization_percent == {"gpu:0": 80.0}  # the CPU meter reports none
    assert busy.utilization_readings["gpu:0"] >= 3
    assert idle.gpu_utilization()[0] == 0.0
    mean, readings, gpus = both.gpu_utilization()
    assert gpus == 1 and readings >= 10
    assert 20.0 < mean < 60.0  # busy for ~0.35 s of ~0.8 s
    # every 0.05 s, not at every 0.01 s power poll
    assert gpu.reads <= mon.utilization_trace[-1][0] / 0.05 + 3
    combined = combine_measurements([busy, replace_gpu(busy, "gpu:1", 40.0)])
    assert combined.gpu_utilization()[0] == pytest.approx(60.0)
    assert "utilization_percent" in busy.to_dict()


def replace_gpu(measurement, component: str, percent: float):
    from dataclasses import replace

    return replace(
        measurement,
        energy_j={component: 1.0},
        provenance={component: Provenance.MEASURED},
        uncertainty_j={component: 0.0},
        in_total={component: True},
        short_window={component: False},
        utilization_percent={component: percent},
        utilization_readings={component: measurement.utilization_readings["gpu:0"]},
    )


def test_no_utilisation_interval_reads_none():
    gpu = BusyGpuMeter("gpu:0", busy=80.0, idle_after_s=10)
    with EnergyMonitor([gpu], interval_s=0.01, utilization_interval_s=None, sync=None) as mon:
        mon.begin_window("a")
        time.sleep(0.1)
        window = mon.end_window("a")
    assert gpu.reads == 0 and window.gpu_utilization() == (None, 0, 0)
    with pytest.raises(ConfigError, match="utilisation interval"):
        EnergyMonitor([gpu], utilization_interval_s=0)


def test_other_energy_is_the_other_components_not_a_residual():
    from wattlab.monitor import Measurement

    def measurement(parts: dict[str, float]) -> Measurement:
        return Measurement(
            name="w", started_at="", duration_s=1.0, energy_j=parts,
            provenance={c: Provenance.ESTIMATED for c in parts},
            uncertainty_j={c: 0.0 for c in parts}, in_total={c: True for c in parts},
        )  # fmt: skip

    # energies whose residual total - cpu - ram is 1e-15-ish in floating point
    plain = measurement({"cpu:estimated": 56.78082290438979, "ram:estimated": 5.008062538970965})
    assert plain.other_energy_j == 0.0
    fan = measurement({"gpu:0": 100.0, "cpu:package-0": 10.0, "fan:0": 0.7})
    assert fan.other_energy_j == 0.7
