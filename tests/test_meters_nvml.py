"""The NVML adapter against a fake pynvml: counter and sampled paths, CUDA_VISIBLE_DEVICES,
MIG refusal, session reference counting and error translation."""

from __future__ import annotations

import threading

import pytest

from tests.fakes.fake_pynvml import (
    FakeClock,
    FakeGpu,
    FakeNvml,
    NVMLError,
    NVMLError_DriverNotLoaded,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
    make_gpus,
)
from wattlab.errors import MeterError
from wattlab.meters.base import Meter, Provenance
from wattlab.meters.nvml import (
    COUNTER_UPDATE_PERIOD_S,
    NvmlGpuMeter,
    NvmlSession,
    nvml_problem,
    open_session_count,
    parse_cuda_visible_devices,
    select_visible_gpus,
    visible_gpus,
)


def test_fake_errors_behave_like_pynvml():
    assert isinstance(NVMLError(3), NVMLError_NotSupported)
    assert NVMLError_NoPermission().value == 4
    assert issubclass(NVMLError_LibraryNotFound, NVMLError)


# -- counter path -----------------------------------------------------------------------------
def test_counter_path_converts_millijoules_and_reads_details():
    gpu = FakeGpu(uuid="GPU-abc", energy_mj=[5_000, 5_000, 7_500, 12_250], power_mw=250_500)
    gpu.limit_mw, gpu.default_limit_mw = 500_000, 700_000
    gpu.utilization_gpu = 87
    nv = FakeNvml([gpu])
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0])
    assert isinstance(meter, Meter)
    assert meter.info.component == "gpu:0"
    assert meter.info.provenance is Provenance.MEASURED
    assert meter.info.update_period_s == COUNTER_UPDATE_PERIOD_S == 0.1
    # baseline 5000 mJ at open; the next reads are 5000, 7500, 12250 mJ
    assert meter.energy_j() == 0.0
    assert meter.energy_j() == pytest.approx(2.5)
    assert meter.energy_j() == pytest.approx(7.25)
    assert meter.power_w() == pytest.approx(250.5)
    assert meter.utilization_percent() == 87.0
    assert meter.relative_uncertainty() == 0.0
    assert meter.sample_error_j() == 0.0
    d = meter.info.details
    assert d["uuid"] == "GPU-abc"
    assert d["name"] == "NVIDIA H200"
    assert d["driver"] == "580.159.04"
    assert d["power_limit_w"] == 500.0
    assert d["default_power_limit_w"] == 700.0
    assert (d["limit_min_w"], d["limit_max_w"]) == (200.0, 700.0)
    assert d["physical_index"] == 0
    assert d["pci_bus_id"] == gpu.pci_bus_id
    meter.close()


def test_counter_reset_never_decreases():
    gpu = FakeGpu(energy_mj=[10_000, 14_000, 1_000, 3_000])
    nv = FakeNvml([gpu])
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0])
    assert meter.energy_j() == pytest.approx(4.0)
    meter.poll()  # a no-op on the counter path: it does not consume the next reading
    assert meter.energy_j() == pytest.approx(5.0)  # driver restarted: 1000 mJ counts as 1 J
    assert meter.energy_j() == pytest.approx(7.0)
    meter.close()


# -- sampled path -----------------------------------------------------------------------------
def _sampled_gpu(clock: FakeClock, watts_at: dict[float, float], **kw) -> tuple[FakeNvml, FakeGpu]:
    gpu = FakeGpu(energy_mj=None, power_mw=lambda t: watts_at[t] * 1000, **kw)
    return FakeNvml([gpu], clock=clock), gpu


def test_sampled_path_trapezoid_by_hand():
    clock = FakeClock(0.0)
    nv, _ = _sampled_gpu(clock, {0.0: 100.0, 1.0: 200.0, 3.0: 150.0, 3.5: 150.0})
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], clock=clock)
    assert meter.info.provenance is Provenance.SAMPLED
    assert meter.sampled
    assert "not supported" in meter.info.details["sampling_reason"]
    clock.t = 1.0
    meter.poll()
    clock.t = 3.0
    # energy_j adds the trapezoid from the last poll to a fresh reading:
    # (100+200)/2 * 1 s + (200+150)/2 * 2 s = 150 + 350 = 500 J
    assert meter.energy_j() == pytest.approx(500.0)
    # bracket: |200-100| * 1 / 2 + |150-200| * 2 / 2 = 50 + 50 = 100 J
    assert meter.sample_error_j() == pytest.approx(100.0)
    clock.t = 3.5
    meter.poll()
    assert meter.energy_j() == pytest.approx(500.0 + 75.0)
    assert meter.relative_uncertainty() == 0.0


def test_sampled_path_bridges_failed_reads():
    clock = FakeClock(0.0)
    gpu = FakeGpu(energy_mj=None, power_mw=[100_000, NVMLError_NotSupported, 300_000])
    nv = FakeNvml([gpu], clock=clock)
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], clock=clock)
    clock.t = 1.0
    meter.poll()  # read fails: nothing added, counted
    assert meter.read_errors == 1
    clock.t = 2.0
    meter.poll()  # 100 W -> 300 W over 2 s
    assert meter.energy_j() == pytest.approx(400.0)


def test_force_sampled_on_a_counter_gpu():
    clock = FakeClock(0.0)
    gpu = FakeGpu(energy_mj=123_456, power_mw=50_000)
    nv = FakeNvml([gpu], clock=clock)
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], force_sampled=True, clock=clock)
    assert meter.info.provenance is Provenance.SAMPLED
    assert meter.info.details["sampling_reason"] == "forced by the caller"
    clock.t = 4.0
    assert meter.energy_j() == pytest.approx(200.0)


def test_sampled_path_prefers_instant_power_when_reported():
    clock = FakeClock(0.0)
    gpu = FakeGpu(
        energy_mj=None,
        power_mw=lambda t: 999_000,  # the 1 s average: must not be used
        instant_power_mw=lambda t: 100_000 + 100_000 * t,  # 100 W rising 100 W/s
    )
    nv = FakeNvml([gpu], clock=clock)
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], clock=clock)
    assert meter.info.details["power_source"] == "NVML_FI_DEV_POWER_INSTANT"
    clock.t = 2.0
    assert meter.power_w() == pytest.approx(300.0)
    assert meter.energy_j() == pytest.approx((100.0 + 300.0) / 2 * 2)
    average = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], power_source="average", clock=clock)
    assert average.power_w() == pytest.approx(999.0)
    assert average.info.details["power_source"].startswith("nvmlDeviceGetPowerUsage")
    with pytest.raises(MeterError, match="power_source 'sometimes' is not one of"):
        NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], power_source="sometimes")
    meter.close()
    average.close()


def test_instant_power_demanded_but_missing():
    nv = FakeNvml([FakeGpu(instant_power_mw=None)])
    with pytest.raises(MeterError, match="NVML_FI_DEV_POWER_INSTANT"):
        NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], power_source="instant")
    assert nv.initialised == 0


def test_meter_refuses_gpu_without_energy_or_power():
    nv = FakeNvml([FakeGpu(energy_mj=None, power_supported=False)])
    with pytest.raises(MeterError, match="neither an energy counter nor power"):
        NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0])
    assert nv.initialised == 0


def test_energy_is_monotonic_under_concurrent_polls():
    clock = FakeClock(0.0)
    nv = FakeNvml([FakeGpu(energy_mj=None, power_mw=lambda t: 100_000 + 50_000 * (t % 2))])
    nv.clock = clock
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0], clock=clock)
    stop = threading.Event()

    def poller():
        while not stop.is_set():
            clock.advance(0.01)
            meter.poll()

    threads = [threading.Thread(target=poller) for _ in range(3)]
    for t in threads:
        t.start()
    readings = [meter.energy_j() for _ in range(300)]
    stop.set()
    for t in threads:
        t.join()
    assert readings == sorted(readings)
    assert readings[-1] > 0


# -- sessions ---------------------------------------------------------------------------------
def test_session_reference_counting():
    nv = FakeNvml(make_gpus(2))
    a = NvmlSession(nv)
    b = NvmlSession(nv)
    assert nv.initialised == 1 and open_session_count(nv) == 2
    assert a.driver_version == "580.159.04"
    a.close()
    a.close()  # idempotent
    assert nv.initialised == 1
    b.close()
    assert nv.initialised == 0 and open_session_count(nv) == 0
    meters = [NvmlGpuMeter(nv, g.job_index, g) for g in visible_gpus(nv, env={})]
    assert nv.initialised == 1
    for m in meters:
        m.close()
    assert nv.initialised == 0


def test_session_init_error_is_not_counted():
    nv = FakeNvml(init_error=NVMLError_LibraryNotFound)
    with pytest.raises(NVMLError_LibraryNotFound):
        NvmlSession(nv)
    assert open_session_count(nv) == 0


# -- CUDA_VISIBLE_DEVICES ---------------------------------------------------------------------
UUIDS = ["GPU-0aaa-1", "GPU-1bbb-2", "GPU-1bbc-3", "GPU-3ddd-4"]


@pytest.mark.parametrize(
    ("value", "expected", "ignored"),
    [
        (None, [0, 1, 2, 3], []),
        ("", [], []),
        ("2,0", [2, 0], []),
        (" 3 , 1 ", [3, 1], []),
        ("GPU-3ddd-4", [3], []),  # full UUID
        ("GPU-3d,0", [3, 0], []),  # unique prefix
        ("gpu-0AAA", [0], []),  # case does not matter
        ("GPU-1bb,0", [], ["GPU-1bb", "0"]),  # ambiguous prefix: CUDA stops there
        ("-1", [], ["-1"]),  # the usual way to hide every GPU
        ("0,7,1", [0], ["7", "1"]),  # unknown index ends the list
        ("1,1", [1], ["1"]),  # duplicate
        ("GPU-ffff", [], ["GPU-ffff"]),
    ],
)
def test_parse_cuda_visible_devices(value, expected, ignored):
    selection = parse_cuda_visible_devices(value, UUIDS)
    assert selection.physical_indices == expected
    assert selection.ignored == ignored


def test_visible_gpus_job_index_follows_cuda_visible_devices():
    nv = FakeNvml(make_gpus(4))
    gpus = visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert [(g.job_index, g.physical_index) for g in gpus] == [(0, 2), (1, 0)]
    assert gpus[0].uuid == nv.gpus[2].uuid
    by_uuid = visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": nv.gpus[3].uuid})
    assert [g.physical_index for g in by_uuid] == [3]
    prefix = nv.gpus[1].uuid[:6]  # "GPU-1a": unique among the four
    assert [g.physical_index for g in visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": prefix})] == [1]
    assert visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": ""}) == []
    meter = NvmlGpuMeter(nv, gpus[0].job_index, gpus[0])
    assert meter.info.component == "gpu:0"
    assert meter.info.details["uuid"] == nv.gpus[2].uuid
    assert meter.info.details["physical_index"] == 2
    meter.close()
    assert nv.initialised == 0


def test_mig_uuid_is_refused_with_one_sentence():
    nv = FakeNvml(make_gpus(1))
    env = {"CUDA_VISIBLE_DEVICES": "MIG-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"}
    with pytest.raises(MeterError) as err:
        visible_gpus(nv, env=env)
    message = str(err.value)
    assert "MIG-5c89852c" in message and "cannot read the energy" in message
    assert "disable MIG" in message
    assert message.count(". ") == 0


def test_gpu_in_mig_mode_is_refused():
    gpus = make_gpus(2)
    gpus[1].mig_current = 1
    nv = FakeNvml(gpus)
    assert len(visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": "0"})) == 1
    with pytest.raises(MeterError, match=r"MIG mode enabled.*nvidia-smi -i 1 -mig 0"):
        visible_gpus(nv, env={})
    assert nv.initialised == 0  # the session was closed on the way out


def test_gpu_without_mig_support_is_fine():
    nv = FakeNvml([FakeGpu(mig_current=None)])
    gpus, selection = select_visible_gpus(nv, env={})
    assert len(gpus) == 1 and selection.raw is None


# -- errors -> problems -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("exc", "reason", "fix"),
    [
        (ImportError("No module named 'pynvml'"), "nvidia-ml-py", "pip install nvidia-ml-py"),
        (NVMLError_LibraryNotFound(), "libnvidia-ml.so.1", "Install the NVIDIA driver"),
        (NVMLError_DriverNotLoaded(), "driver is not loaded", "modprobe nvidia"),
        (NVMLError_NoPermission(), "permissions", "/dev/nvidia"),
        (NVMLError(999), "NVMLError_Unknown", "nvidia-smi"),
    ],
)
def test_nvml_problem_reason_and_fix(exc, reason, fix):
    problem = nvml_problem(exc)
    assert problem.component == "gpu"
    assert reason in problem.reason
    assert fix in problem.fix
    assert problem.fallback.startswith("none")


def test_real_pynvml_without_driver_gives_library_not_found():
    pynvml = pytest.importorskip("pynvml")
    try:
        NvmlSession(pynvml).close()
    except pynvml.NVMLError as exc:
        assert "NVML" in nvml_problem(exc).reason
    else:
        pytest.skip("this machine has a working NVIDIA driver")
