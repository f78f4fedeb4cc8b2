"""discover_meters: combinations of GPUs, RAPL zones, permissions and fallbacks."""

from __future__ import annotations

import sys

import pytest

from tests.fakes.fake_gpu import FakeDevice, FakeNvmlBackend, make_devices
from tests.fakes.powercap import FakePowercap, build_powercap
from wattlab.errors import ConfigError, MeterError
from wattlab.meters.base import Provenance
from wattlab.meters.discover import describe_discovery, discover_meters

CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nphysical id\t: 0\n"
SEAMS = {
    "cpuinfo_text": CPUINFO,
    "utilisation_fn": lambda: 0.5,
    "used_bytes_fn": lambda: 4 * 2**30,
}


def _components(discovery):
    return sorted(m.info.component for m in discovery.meters)


def test_gpus_rapl_and_psys(tmp_path):
    build_powercap(tmp_path, sockets=2, dram=True, psys=True)
    nv = FakeNvmlBackend(make_devices(2))
    d = discover_meters(pynvml_module=nv, powercap_root=tmp_path, env={}, **SEAMS)
    assert d.problems == []
    assert _components(d) == [
        "cpu:package-0",
        "cpu:package-1",
        "dram:package-0",
        "dram:package-1",
        "gpu:0",
        "gpu:1",
        "psys:0",
    ]
    in_total = {m.info.component: m.info.details["in_total"] for m in d.meters}
    assert in_total.pop("psys:0") is False
    assert all(in_total.values())
    assert all(m.info.provenance is Provenance.MEASURED for m in d.meters)
    assert nv.initialised == 2  # each GPU meter holds an NVML session open
    d.close()
    assert nv.initialised == 0


def test_unreadable_rapl_falls_back_to_estimates(tmp_path):
    tree = build_powercap(tmp_path, sockets=1, dram=True)
    tree.deny("intel-rapl:0", "intel-rapl:0:2")
    d = discover_meters(
        include_gpus=False,
        powercap_root=tmp_path,
        rapl_read_text=tree.read_text,
        env={},
        **SEAMS,
    )
    assert _components(d) == ["cpu:estimated", "ram:estimated"]
    assert all(m.info.provenance is Provenance.ESTIMATED for m in d.meters)
    package = next(p for p in d.problems if p.component == "rapl:package-0")
    assert "chmod o+r" in package.fix
    assert "estimated CPU power" in package.fallback


def test_package_without_dram_zone_estimates_memory_only(tmp_path):
    build_powercap(tmp_path, sockets=1, dram=False)
    d = discover_meters(include_gpus=False, powercap_root=tmp_path, env={}, **SEAMS)
    assert _components(d) == ["cpu:package-0", "ram:estimated"]
    assert [p.component for p in d.problems] == ["rapl:dram"]
    assert "no RAPL dram zone" in d.problems[0].reason


def test_partly_readable_packages_use_the_estimate_for_all(tmp_path):
    tree = build_powercap(tmp_path, sockets=2, dram=False)
    tree.deny("intel-rapl:1")
    d = discover_meters(
        include_gpus=False, powercap_root=tmp_path, rapl_read_text=tree.read_text, env={}, **SEAMS
    )
    assert _components(d) == ["cpu:estimated", "ram:estimated"]
    assert "rapl:package" in [p.component for p in d.problems]


def test_no_powercap_tree_uses_the_users_tdp(tmp_path):
    d = discover_meters(
        include_gpus=False, powercap_root=tmp_path / "none", cpu_tdp_w=95.0, env={}, **SEAMS
    )
    cpu = next(m for m in d.meters if m.info.component == "cpu:estimated")
    assert cpu.info.details["tdp_w"] == 95.0 and cpu.info.details["tdp_source"] == "user"
    assert [p.component for p in d.problems] == ["rapl"]


def test_include_host_false_for_other_ddp_ranks(tmp_path):
    build_powercap(tmp_path, sockets=1)
    nv = FakeNvmlBackend(make_devices(2))
    d = discover_meters(
        pynvml_module=nv,
        powercap_root=tmp_path,
        include_host=False,
        env={"CUDA_VISIBLE_DEVICES": "1"},
    )
    assert _components(d) == ["gpu:0"]
    assert d.meters[0].info.details["uuid"] == nv.devices[1].uuid
    d.close()


def test_include_gpus_false_never_touches_nvml(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    d = discover_meters(
        pynvml_module=nv, include_gpus=False, powercap_root=tmp_path, env={}, **SEAMS
    )
    assert nv.sessions_opened == 0
    assert not any(m.info.kind == "gpu" for m in d.meters)


@pytest.mark.parametrize(
    ("error", "text"),
    [
        ("NVMLError_LibraryNotFound", "libnvidia-ml.so.1"),
        ("NVMLError_DriverNotLoaded", "not loaded"),
    ],
)
def test_nvml_failure_is_a_problem_and_host_still_metered(tmp_path, error, text):
    build_powercap(tmp_path, sockets=1)
    nv = FakeNvmlBackend(init_error=error)
    d = discover_meters(pynvml_module=nv, powercap_root=tmp_path, env={}, **SEAMS)
    assert [p.component for p in d.problems] == ["gpu"]
    assert text in d.problems[0].reason
    assert "cpu:package-0" in _components(d)


def test_pynvml_not_installed(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    d = discover_meters(include_host=False, env={})
    assert d.meters == []
    assert "nvidia-ml-py" in d.problems[0].reason


def test_mig_is_an_error_not_a_silent_skip(tmp_path):
    gpus = make_devices(1)
    gpus[0].mig = True
    nv = FakeNvmlBackend(gpus)
    with pytest.raises(MeterError, match="MIG"):
        discover_meters(pynvml_module=nv, include_host=False, env={})
    assert nv.initialised == 0


def test_gpu_without_energy_counter_is_sampled_and_reported():
    nv = FakeNvmlBackend([FakeDevice(counter_j=None, name="Tesla P100")])
    d = discover_meters(pynvml_module=nv, include_host=False, env={})
    assert d.meters[0].info.provenance is Provenance.SAMPLED
    assert d.problems[0].component == "gpu:0"
    assert "Tesla P100" in d.problems[0].reason and "sampled" in d.problems[0].fallback
    d.close()


def test_force_sampled_gpu_is_not_a_problem():
    nv = FakeNvmlBackend(make_devices(1))
    d = discover_meters(pynvml_module=nv, include_host=False, force_sampled_gpu=True, env={})
    assert d.meters[0].info.provenance is Provenance.SAMPLED
    assert d.problems == []
    d.close()


@pytest.mark.parametrize(
    ("visible", "reason", "n_meters"),
    [("", "hides every GPU", 0), ("0,5", "names no GPU", 1), ("-1", "names no GPU", 0)],
)
def test_cuda_visible_devices_problems(visible, reason, n_meters):
    nv = FakeNvmlBackend(make_devices(2))
    d = discover_meters(pynvml_module=nv, include_host=False, env={"CUDA_VISIBLE_DEVICES": visible})
    assert len(d.meters) == n_meters
    assert any(reason in p.reason for p in d.problems)
    d.close()


def test_no_gpu_at_all():
    d = discover_meters(pynvml_module=FakeNvmlBackend([]), include_host=False, env={})
    assert d.meters == []
    assert "no NVIDIA GPU" in d.problems[0].reason


def test_describe_discovery_rows(tmp_path):
    tree = FakePowercap(tmp_path)
    tree.add_package(0, dram=False)
    tree.add_psys(1)
    nv = FakeNvmlBackend(make_devices(1))
    d = discover_meters(pynvml_module=nv, powercap_root=tmp_path, env={}, **SEAMS)
    rows = describe_discovery(d)
    keys = {
        "status",
        "component",
        "source",
        "provenance",
        "in_total",
        "description",
        "reason",
        "fix",
        "fallback",
    }
    assert all(set(r) == keys for r in rows)
    by_component = {r["component"]: r for r in rows}
    assert by_component["gpu:0"]["provenance"] == "measured"
    assert by_component["gpu:0"]["source"] == "nvml"
    assert by_component["psys:0"]["in_total"] is False
    assert by_component["ram:estimated"]["provenance"] == "estimated"
    missing = [r for r in rows if r["status"] == "missing"]
    assert [r["component"] for r in missing] == ["rapl:dram"]
    assert missing[0]["fix"] and missing[0]["fallback"]
    d.close()


def test_gpu_indices_select_the_ranks_own_gpu(tmp_path):
    nv = FakeNvmlBackend(make_devices(2))
    d = discover_meters(
        pynvml_module=nv,
        gpu_indices=[1],
        include_host=False,
        powercap_root=tmp_path,
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert [m.info.component for m in d.meters] == ["gpu:1"]
    d.close()
    d = discover_meters(pynvml_module=nv, gpu_indices=[3], include_host=False, env={})
    assert d.meters == []
    assert d.problems[0].component == "gpu:3"


def test_the_ram_estimate_counts_the_chosen_memory(tmp_path):
    import os
    import subprocess

    build_powercap(tmp_path, sockets=1, dram=False)
    seams = {k: v for k, v in SEAMS.items() if k != "used_bytes_fn"}  # the real readings
    # every page written (a bare bytearray(n) is calloc'd zero pages, which are not resident)
    code = "b = b'\\x01' * (300 * 2**20); print('ready', flush=True); input()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        found = {}
        for measure, pid in (("system", None), ("process", child.pid), ("process", None)):
            d = discover_meters(include_gpus=False, powercap_root=tmp_path, env={},
                                ram_measure=measure, ram_pid=pid, **seams)  # fmt: skip
            ram = next(m for m in d.meters if m.info.component == "ram:estimated")
            assert ram.info.details["ram_measure"] == measure
            found[(measure, pid)] = ram.power_w()
            d.close()
    finally:
        child.kill()
        child.wait()
    w_per_gib = 0.3725
    child_w, own_w = found[("process", child.pid)], found[("process", None)]
    assert child_w > 300 / 1024 * w_per_gib  # the child's resident 300 MiB at least
    assert found[("system", None)] > child_w  # the whole system holds more than one process
    assert own_w > 0 and os.getpid() != child.pid
    with pytest.raises(ConfigError, match="RAM measure must be one of system, process"):
        discover_meters(include_gpus=False, powercap_root=tmp_path, env={}, ram_measure="rss")
