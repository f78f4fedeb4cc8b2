"""The RAPL adapter against a fake powercap tree: zones, units, wraparound, permissions."""

from __future__ import annotations

import pytest

from tests.fakes.clock import FakeClock
from tests.fakes.powercap import FakePowercap, build_powercap
from wattlab.errors import MeterError
from wattlab.meters.base import CPU, DRAM, PSYS, Meter, Provenance
from wattlab.meters.rapl import (
    DEFAULT_POWERCAP_ROOT,
    RaplMeter,
    open_rapl,
    resolve_powercap_root,
    scan_zones,
    time_to_wrap_s,
)


def test_two_sockets_with_dram_and_core(tmp_path):
    tree = build_powercap(tmp_path, sockets=2, dram=True, core=True)
    scan = open_rapl(tmp_path)
    assert scan.problems == []
    components = sorted(m.info.component for m in scan.meters)
    assert components == ["cpu:package-0", "cpu:package-1", "dram:package-0", "dram:package-1"]
    for meter in scan.meters:
        assert isinstance(meter, Meter)
        assert meter.info.provenance is Provenance.MEASURED
        assert meter.info.source == "rapl"
    package0 = next(m for m in scan.packages() if m.info.component == "cpu:package-0")
    assert package0.info.kind == CPU
    # core is inside the package: listed, not metered
    assert any("intel-rapl:0:0 (core)" in s for s in package0.info.details["not_summed"])
    assert {m.info.kind for m in scan.drams()} == {DRAM}
    # the flat links of /sys/class/powercap are used, not the nested directories
    assert package0.info.details["path"] == str(tmp_path / "intel-rapl:0")

    tree.advance_uj("intel-rapl:0", 5_000_000)
    tree.advance_uj("intel-rapl:1", 1_500_000)
    tree.advance_uj("intel-rapl:1:2", 250_000)
    energies = {m.info.component: m.energy_j() for m in scan.meters}
    assert energies == pytest.approx(
        {"cpu:package-0": 5.0, "cpu:package-1": 1.5, "dram:package-0": 0.0, "dram:package-1": 0.25}
    )


def test_nested_root_is_scanned_too(tmp_path):
    build_powercap(tmp_path, sockets=1)
    zones = scan_zones(tmp_path / "intel-rapl")  # like /sys/devices/virtual/powercap/intel-rapl
    assert [(z.zone_id, z.name, z.parent_name) for z in zones] == [
        ("intel-rapl:0", "package-0", None),
        ("intel-rapl:0:0", "core", "package-0"),
        ("intel-rapl:0:2", "dram", "package-0"),
    ]


def test_one_wrap(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, max_range_uj=10_000_000)
    tree.set_uj("intel-rapl:0", 9_000_000)
    meter = open_rapl(tmp_path).meters[0]
    tree.advance_uj("intel-rapl:0", 3_000_000)  # 9 J -> 12 J = wraps to 2 J
    assert tree.get_uj("intel-rapl:0") == 2_000_000
    meter.poll()
    assert meter.wraps == 1
    assert meter.energy_j() == pytest.approx(3.0)


def test_several_wraps_in_one_window_with_polls_between(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, max_range_uj=1_000_000)  # wraps every 1 J
    meter = open_rapl(tmp_path).meters[0]
    start = meter.energy_j()
    for _ in range(5):
        tree.advance_uj("intel-rapl:0", 700_000)  # 0.7 J per poll interval
        meter.poll()
    assert meter.wraps == 3
    assert meter.energy_j() - start == pytest.approx(3.5)


def test_energy_never_decreases_across_wraps(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, max_range_uj=1_000_000)
    meter = open_rapl(tmp_path).meters[0]
    readings = []
    for step in range(20):
        tree.advance_uj("intel-rapl:0", 130_000 + 10_000 * step)
        readings.append(meter.energy_j())
    assert readings == sorted(readings)
    assert readings[-1] == pytest.approx(sum(130_000 + 10_000 * s for s in range(20)) / 1e6)


def test_power_from_last_two_polls(tmp_path):
    tree = build_powercap(tmp_path, sockets=1, dram=False, core=False)
    clock = FakeClock(10.0)
    meter = open_rapl(tmp_path, clock=clock).meters[0]
    assert meter.power_w() is None
    meter.poll()
    assert meter.power_w() is None
    clock.t = 12.0
    tree.advance_uj("intel-rapl:0", 90_000_000)  # 90 J in 2 s
    meter.poll()
    assert meter.power_w() == pytest.approx(45.0)


def test_poll_interval_helpers(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, max_range_uj=262_143_328_850)
    meter = open_rapl(tmp_path).meters[0]
    assert time_to_wrap_s(262_143_328_850, 250.0) == pytest.approx(1048.57, rel=1e-4)
    assert meter.min_poll_interval_s(500.0) == pytest.approx(524.29, rel=1e-4)
    details = meter.info.details
    assert details["required_poll_interval_s"] == pytest.approx(
        time_to_wrap_s(262_143_328_850, details["assumed_max_power_w"]) / 2
    )
    assert details["max_energy_range_j"] == pytest.approx(262_143.32885)


def test_permission_denied_becomes_problem_with_fix(tmp_path):
    tree = build_powercap(tmp_path, sockets=2)
    tree.deny("intel-rapl:0", "intel-rapl:1", "intel-rapl:0:2", "intel-rapl:1:2")
    scan = open_rapl(tmp_path, read_text=tree.read_text)
    assert scan.meters == []
    assert len(scan.problems) == 4
    package_problem = next(p for p in scan.problems if p.component == "rapl:package-0")
    assert "not readable" in package_problem.reason and "CVE-2020-8694" in package_problem.reason
    assert f"sudo chmod o+r {tmp_path}/intel-rapl:*/energy_uj" in package_problem.fix
    assert "root" in package_problem.fix
    assert "estimated CPU power" in package_problem.fallback
    dram_problem = next(p for p in scan.problems if p.component == "rapl:package-0/dram")
    assert "estimated memory power" in dram_problem.fallback
    # the denial really came from reading energy_uj through the seam
    assert any(p.name == "energy_uj" for p in tree.reads)


def test_psys_and_mmio_and_uncore(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=True, uncore=True)
    tree.add_psys(1)
    tree.add_zone("intel-rapl-mmio:0", "package-0", control_type="intel-rapl-mmio")
    scan = open_rapl(tmp_path)
    kinds = {m.info.component: m.info.kind for m in scan.meters}
    assert kinds == {"cpu:package-0": CPU, "psys:0": PSYS}
    not_summed = scan.packages()[0].info.details["not_summed"]
    assert any("uncore" in s for s in not_summed)
    assert any("core" in s for s in not_summed)
    assert any("intel-rapl-mmio:0" in s and "duplicate" in s for s in not_summed)


def test_missing_tree_is_a_problem_not_an_error(tmp_path):
    scan = open_rapl(tmp_path / "nowhere")
    assert scan.meters == []
    assert len(scan.problems) == 1
    problem = scan.problems[0]
    assert problem.component == "rapl"
    assert "no RAPL zones" in problem.reason and "modprobe intel_rapl_msr" in problem.fix


def test_powercap_root_resolution(tmp_path):
    assert resolve_powercap_root(None, env={}) == DEFAULT_POWERCAP_ROOT
    assert resolve_powercap_root(None, env={"WATTLAB_POWERCAP_ROOT": str(tmp_path)}) == tmp_path
    assert resolve_powercap_root(tmp_path / "x", env={"WATTLAB_POWERCAP_ROOT": "/y"}) == (
        tmp_path / "x"
    )
    build_powercap(tmp_path, sockets=1)
    scan = open_rapl(env={"WATTLAB_POWERCAP_ROOT": str(tmp_path)})
    assert [m.info.component for m in scan.packages()] == ["cpu:package-0"]


def test_read_failure_after_open_is_a_meter_error(tmp_path):
    tree = build_powercap(tmp_path, sockets=1, dram=False)
    meter: RaplMeter = open_rapl(tmp_path, read_text=tree.read_text).meters[0]
    tree.advance_uj("intel-rapl:0", 2_000_000)
    meter.poll()
    tree.deny("intel-rapl:0")
    meter.poll()  # a sampler thread never dies of it
    assert meter.read_errors == 1
    with pytest.raises(MeterError, match="energy_uj"):
        meter.energy_j()
    meter.close()
    assert meter.energy_j() == pytest.approx(2.0)


# -- glitches: a counter that goes backwards is not a wrap ----------------------------------------


def test_a_small_step_back_is_a_glitch_not_a_262_kj_wrap(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, energy_uj=1000)  # a 262 kJ range
    meter = open_rapl(tmp_path).meters[0]
    tree.set_uj("intel-rapl:0", 999)
    meter.poll()
    assert meter.wraps == 0
    assert "glitch, not a wrap" in meter.info.details["glitch"]
    with pytest.raises(MeterError, match="999 uJ.*not reported"):
        meter.energy_j()
    tree.set_uj("intel-rapl:0", 5000)  # it stays flagged: later numbers are not trusted
    with pytest.raises(MeterError, match="glitch"):
        meter.energy_j()


@pytest.mark.parametrize("raw", ["-5", "262143328851"])
def test_a_counter_outside_its_range_is_a_glitch(tmp_path, raw):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, energy_uj=1000)
    meter = open_rapl(tmp_path).meters[0]
    (tree.path("intel-rapl:0") / "energy_uj").write_text(raw + "\n")
    with pytest.raises(MeterError, match="outside the counter's range"):
        meter.energy_j()


def test_a_wrap_is_believed_when_the_time_allows_it(tmp_path):
    clock = FakeClock()
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False, energy_uj=1000)  # range 262 143 J
    meter = RaplMeter(
        open_rapl(tmp_path).zones[0], "cpu:package-0", CPU, clock=clock, assumed_max_power_w=1000
    )
    clock.advance(300.0)  # 300 s at up to 1000 W: a full wrap (262 kJ) is possible
    tree.set_uj("intel-rapl:0", 999)
    assert meter.energy_j() == pytest.approx((262_143_328_850 - 1) / 1e6)
    assert meter.wraps == 1 and "glitch" not in meter.info.details


def test_zone_names_that_are_not_utf8_are_kept_visible(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False, core=False)
    (tree.path("intel-rapl:0") / "name").write_bytes(b"package-\xff\n")
    zones = scan_zones(tmp_path)
    assert [z.name for z in zones] == ["package-\\xff"]
    assert open_rapl(tmp_path).meters == []  # an unknown zone is listed, not metered


def test_empty_powercap_root_variable_means_the_default():
    assert resolve_powercap_root(None, {"WATTLAB_POWERCAP_ROOT": ""}) == DEFAULT_POWERCAP_ROOT
