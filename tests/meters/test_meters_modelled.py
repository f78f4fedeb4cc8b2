"""CPU and memory estimates with injected utilisation, memory and clock."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from tests.fakes.clock import FakeClock
from wattlab.errors import ConfigError
from wattlab.meters.base import CPU, RAM, Meter, Provenance
from wattlab.meters.modelled import (
    CPU_TDP_TABLE,
    GIB,
    PER_THREAD_FALLBACK_W,
    CpuEstimateMeter,
    CpuTimesUtilisation,
    RamEstimateMeter,
    lookup_tdp,
    parse_cpuinfo,
    process_tree_rss_bytes,
    resolve_cpu_tdp,
)


def _cpuinfo(model: str, logical: int, sockets: int = 1) -> str:
    blocks = []
    for i in range(logical):
        socket = i * sockets // logical
        blocks.append(f"processor\t: {i}\nmodel name\t: {model}\nphysical id\t: {socket}\n")
    return "\n".join(blocks)


def test_cpu_estimate_integrates_the_linear_model():
    clock = FakeClock(0.0)
    utilisation = iter([0.0, 0.5, 1.0])  # first call only starts the interval
    meter = CpuEstimateMeter(100.0, lambda: next(utilisation), clock=clock)
    assert isinstance(meter, Meter)
    assert meter.info.component == "cpu:estimated" and meter.info.kind == CPU
    assert meter.info.provenance is Provenance.ESTIMATED
    assert meter.power_w() is None
    clock.t = 2.0
    meter.poll()  # 100 W x (0.3 + 0.7 x 0.5) = 65 W for 2 s
    assert meter.power_w() == pytest.approx(65.0)
    clock.t = 3.0
    assert meter.energy_j() == pytest.approx(130.0 + 100.0)  # then 100 W for 1 s
    assert meter.relative_uncertainty() == 0.4
    assert "0.3 + 0.7 x a given CPU utilisation" in meter.info.description
    assert meter.info.details["tdp_source"] == "user"
    meter.close()
    assert meter.energy_j() == pytest.approx(230.0)


def test_cpu_estimate_clamps_utilisation_and_rejects_bad_tdp():
    clock = FakeClock(0.0)
    meter = CpuEstimateMeter(50.0, lambda: 1.7, idle_fraction=0.0, clock=clock)
    clock.t = 1.0
    assert meter.energy_j() == pytest.approx(50.0)
    with pytest.raises(ConfigError, match=r"--cpu-tdp must be a positive number of watts, got -5"):
        CpuEstimateMeter(-5, lambda: 0.0)


def test_tdp_from_user_table_and_fallback():
    user = resolve_cpu_tdp(140.0, cpuinfo_text=_cpuinfo("AMD EPYC 7763 64-Core Processor", 128))
    assert (user.tdp_w, user.source) == (140.0, "user")

    full = resolve_cpu_tdp(cpuinfo_text=_cpuinfo("Intel(R) Xeon(R) Platinum 8480+", 224, 2))
    assert (full.tdp_w, full.source, full.sockets) == (700.0, "table", 2)

    # a VM seeing 16 threads of a 112-thread socket gets 16/112 of its TDP
    vm = resolve_cpu_tdp(cpuinfo_text=_cpuinfo("Intel(R) Xeon(R) Platinum 8480+", 16))
    assert vm.tdp_w == pytest.approx(350.0 * 16 / 112)

    # the lent GPU machine: a generic name, 16 vCPUs -> per-thread fallback
    lent = resolve_cpu_tdp(cpuinfo_text=_cpuinfo("Intel(R) Xeon(R) Processor", 16))
    assert lent.source == "per-thread fallback"
    assert lent.tdp_w == pytest.approx(16 * PER_THREAD_FALLBACK_W)

    with pytest.raises(ConfigError, match="--cpu-tdp"):
        resolve_cpu_tdp(0.0, cpuinfo_text="")


def test_fallback_is_near_the_table_median():
    ratios = [s.tdp_w / s.threads for s in CPU_TDP_TABLE]
    assert abs(PER_THREAD_FALLBACK_W - statistics.median(ratios)) < 0.3


def test_lookup_prefers_the_longest_match():
    assert lookup_tdp("Intel(R) Xeon(R) Platinum 8480+ CPU").tdp_w == 350
    assert lookup_tdp("AMD EPYC 9654 96-Core Processor").threads == 192
    assert lookup_tdp("Some Unknown CPU") is None


def test_parse_cpuinfo():
    assert parse_cpuinfo(_cpuinfo("X", 8, 2)) == ("X", 2, 8)
    assert parse_cpuinfo("") == ("", 1, 0)


def test_from_machine_records_where_the_tdp_came_from():
    clock = FakeClock(0.0)
    meter = CpuEstimateMeter.from_machine(
        None, lambda: 0.0, cpuinfo_text=_cpuinfo("Intel(R) Xeon(R) Processor", 16), clock=clock
    )
    d = meter.info.details
    assert d["tdp_source"] == "per-thread fallback"
    assert d["logical_cpus"] == 16 and d["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert meter.tdp_w == pytest.approx(56.0)


def test_ram_estimate_trapezoid_on_memory_in_use():
    clock = FakeClock(0.0)
    used = iter([8 * GIB, 16 * GIB, 16 * GIB])
    meter = RamEstimateMeter(used_bytes_fn=lambda: next(used), clock=clock)
    assert meter.info.component == "ram:estimated" and meter.info.kind == RAM
    assert meter.info.provenance is Provenance.ESTIMATED
    assert meter.power_w() == pytest.approx(0.3725 * 8)
    clock.t = 10.0
    meter.poll()  # (8 + 16) / 2 GiB x 0.3725 W/GiB x 10 s
    assert meter.energy_j() == pytest.approx(0.3725 * 12 * 10)
    assert meter.info.details["memory_unit"].startswith("GiB")
    assert meter.relative_uncertainty() == 0.5


def test_real_cpu_times_utilisation_is_a_fraction():
    util = CpuTimesUtilisation()
    sum(i * i for i in range(20_000))
    assert 0.0 <= util() <= 1.0


def test_ram_estimate_says_which_memory_it_counts():
    system = RamEstimateMeter(used_bytes_fn=lambda: 8 * GIB, clock=FakeClock(0.0))
    assert system.info.details["ram_measure"] == "system"
    assert "whole system" in system.info.description
    process = RamEstimateMeter(measure="process", clock=FakeClock(0.0))
    assert process.info.details["ram_measure"] == "process"
    assert "resident memory (RSS)" in process.info.description
    rss_gib = process_tree_rss_bytes() / GIB
    assert process.power_w() == pytest.approx(0.3725 * rss_gib, rel=0.2)
    with pytest.raises(ConfigError, match="RAM measure must be one of system, process"):
        RamEstimateMeter(measure="node")


def test_process_rss_counts_the_children():
    before = process_tree_rss_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(256 * 2**20); print('ready', flush=True); "
         "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        assert process_tree_rss_bytes() - before >= 200 * 2**20
    finally:
        child.stdin.close()
        child.wait(timeout=30)
