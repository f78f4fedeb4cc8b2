"""NVML: the adapter (``NvmlDevice``, sessions, CUDA_VISIBLE_DEVICES, errors) against a thin fake
pynvml, and the GPU meter (counter and sampled paths) against the fake at the adapter's
interface."""

from __future__ import annotations

import threading

import pytest

from tests.fakes.clock import FakeClock
from tests.fakes.fake_gpu import FakeDevice, FakeNvmlBackend, make_devices
from tests.fakes.fake_pynvml import (
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
    GpuDevice,
    NvmlDevice,
    NvmlError,
    NvmlGpuMeter,
    NvmlSession,
    nvml_problem,
    open_session,
    open_session_count,
    parse_cuda_visible_devices,
    select_visible_gpus,
    visible_gpus,
)


def test_fake_errors_behave_like_pynvml():
    assert isinstance(NVMLError(3), NVMLError_NotSupported)
    assert NVMLError_NoPermission().value == 4
    assert issubclass(NVMLError_LibraryNotFound, NVMLError)


# -- the adapter on (fake) pynvml: units converted once, errors translated once ----------------
def _device(nv: FakeNvml, index: int = 0) -> NvmlDevice:
    return NvmlSession(nv).devices()[index]


def test_device_converts_milliwatts_and_millijoules():
    gpu = FakeGpu(uuid="GPU-abc", energy_mj=12_345, power_mw=250_500, instant_power_mw=180_250)
    gpu.limit_mw, gpu.default_limit_mw, gpu.utilization_gpu = 500_000, 650_000, 87
    nv = FakeNvml([gpu])
    device = _device(nv)
    assert isinstance(device, GpuDevice)
    assert (device.uuid, device.name, device.physical_index) == ("GPU-abc", "NVIDIA H200", 0)
    assert device.energy_counter_j() == pytest.approx(12.345)
    assert device.average_power_w() == pytest.approx(250.5)
    assert device.instant_power_w() == pytest.approx(180.25)
    assert device.utilization_percent() == 87.0
    assert device.power_limit_w() == 500.0
    assert device.default_power_limit_w() == 650.0
    assert device.power_limit_range_w() == (200.0, 700.0)
    assert device.pci_bus_id() == gpu.pci_bus_id
    assert device.mig_enabled() is False
    assert device.temperature_c() == 35.0
    device.set_power_limit_w(312.3456)  # NVML takes whole milliwatts
    assert nv.set_calls() == [("nvmlDeviceSetPowerManagementLimit", (0, 312_346))]
    assert device.power_limit_w() == pytest.approx(312.346)


def test_device_translates_nvml_errors():
    gpu = FakeGpu(energy_mj=None, power_supported=False, set_permission_denied=True)
    gpu.mig_current = None
    nv = FakeNvml([gpu])
    device = _device(nv)
    assert device.energy_counter_j() is None  # NotSupported: no counter, not an error
    assert device.average_power_w() is None
    assert device.instant_power_w() is None  # the field is not reported
    assert device.mig_enabled() is False  # MIG not supported
    gpu.temperature_c = None
    assert device.temperature_c() is None
    with pytest.raises(NvmlError) as err:
        device.set_power_limit_w(300)
    assert err.value.name == "NVMLError_NoPermission" and err.value.no_permission
    assert err.value.call == "nvmlDeviceSetPowerManagementLimit"

    def lost(handle):
        raise nv.NVMLError_GpuIsLost()

    nv.nvmlDeviceGetTotalEnergyConsumption = lost
    with pytest.raises(NvmlError, match="NVMLError_GpuIsLost: GPU is lost"):
        device.energy_counter_j()


def test_device_reads_mig_mode():
    gpus = make_gpus(2)
    gpus[1].mig_current = 1
    nv = FakeNvml(gpus)
    session = NvmlSession(nv)
    assert [d.mig_enabled() for d in session.devices()] == [False, True]
    session.close()


def test_meter_on_the_real_adapter_end_to_end():
    gpu = FakeGpu(uuid="GPU-abc", energy_mj=[5_000, 5_000, 7_500], power_mw=250_500)
    gpu.limit_mw = 500_000
    nv = FakeNvml([gpu])
    meter = NvmlGpuMeter(nv, 0, visible_gpus(nv, env={})[0])
    assert meter.energy_j() == 0.0
    assert meter.energy_j() == pytest.approx(2.5)
    assert meter.power_w() == pytest.approx(250.5)
    assert meter.info.details["driver"] == "580.159.04"
    assert meter.info.details["power_limit_w"] == 500.0
    assert nv.initialised == 1
    meter.close()
    assert nv.initialised == 0


# -- the meter on the adapter fake: counter path ----------------------------------------------
def _meter(device: FakeDevice, clock: FakeClock | None = None, **kw) -> NvmlGpuMeter:
    clock = clock or FakeClock(0.0)
    backend = FakeNvmlBackend([device], clock=clock)
    return NvmlGpuMeter(backend, 0, device, clock=clock, **kw)


def test_counter_path_reads_joules_and_details():
    device = FakeDevice(uuid="GPU-abc", counter_j=[5.0, 5.0, 7.5, 12.25], average_w=250.5)
    device.limit_w, device.default_limit_w, device.utilization = 500.0, 700.0, 87.0
    meter = _meter(device)
    assert isinstance(meter, Meter)
    assert meter.info.component == "gpu:0"
    assert meter.info.provenance is Provenance.MEASURED
    assert meter.info.update_period_s == COUNTER_UPDATE_PERIOD_S == 0.1
    # baseline 5 J at open; the next reads are 5, 7.5, 12.25 J
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
    assert d["pci_bus_id"] == device.bus_id
    meter.close()


def test_counter_reset_never_decreases():
    meter = _meter(FakeDevice(counter_j=[10.0, 14.0, 1.0, 3.0]))
    assert meter.energy_j() == pytest.approx(4.0)
    meter.poll()  # a no-op on the counter path: it does not consume the next reading
    assert meter.energy_j() == pytest.approx(5.0)  # driver restarted: 1 J counts as 1 J
    assert meter.energy_j() == pytest.approx(7.0)
    meter.close()


def test_counter_read_failure_is_one_sentence():
    meter = _meter(FakeDevice(counter_j=[1.0, NvmlError("NVMLError_GpuIsLost", "GPU is lost")]))
    with pytest.raises(MeterError, match=r"gpu:0 failed \(NVMLError_GpuIsLost: GPU is lost\)"):
        meter.energy_j()
    meter.close()


def test_limits_missing_are_none_not_an_error():
    meter = _meter(FakeDevice(limits_supported=False))
    assert meter.info.details["power_limit_w"] is None
    assert meter.info.details["limit_max_w"] is None
    meter.close()


# -- sampled path -----------------------------------------------------------------------------
def test_sampled_path_trapezoid_by_hand():
    clock = FakeClock(0.0)
    watts_at = {0.0: 100.0, 1.0: 200.0, 3.0: 150.0, 3.5: 150.0}
    meter = _meter(FakeDevice(counter_j=None, average_w=lambda t: watts_at[t]), clock)
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
    lost = NvmlError("NVMLError_NotSupported")
    meter = _meter(FakeDevice(counter_j=None, average_w=[100.0, lost, 300.0]), clock)
    clock.t = 1.0
    meter.poll()  # read fails: nothing added, counted
    assert meter.read_errors == 1
    clock.t = 2.0
    meter.poll()  # 100 W -> 300 W over 2 s
    assert meter.energy_j() == pytest.approx(400.0)


def test_force_sampled_on_a_counter_gpu():
    clock = FakeClock(0.0)
    meter = _meter(FakeDevice(counter_j=123.456, average_w=50.0), clock, force_sampled=True)
    assert meter.info.provenance is Provenance.SAMPLED
    assert meter.info.details["sampling_reason"] == "forced by the caller"
    clock.t = 4.0
    assert meter.energy_j() == pytest.approx(200.0)


def test_sampled_path_prefers_instant_power_when_reported():
    clock = FakeClock(0.0)
    device = FakeDevice(
        counter_j=None,
        average_w=999.0,  # the 1 s average: must not be used
        instant_w=lambda t: 100.0 + 100.0 * t,  # 100 W rising 100 W/s
    )
    meter = _meter(device, clock)
    assert meter.info.details["power_source"] == "NVML_FI_DEV_POWER_INSTANT"
    clock.t = 2.0
    assert meter.power_w() == pytest.approx(300.0)
    assert meter.energy_j() == pytest.approx((100.0 + 300.0) / 2 * 2)
    average = _meter(device, clock, power_source="average")
    assert average.power_w() == pytest.approx(999.0)
    assert average.info.details["power_source"].startswith("nvmlDeviceGetPowerUsage")
    with pytest.raises(MeterError, match="power_source 'sometimes' is not one of"):
        _meter(device, clock, power_source="sometimes")
    meter.close()
    average.close()


def test_instant_power_demanded_but_missing():
    device = FakeDevice(instant_w=None)
    backend = FakeNvmlBackend([device])
    with pytest.raises(MeterError, match="NVML_FI_DEV_POWER_INSTANT"):
        NvmlGpuMeter(backend, 0, device, power_source="instant")
    assert backend.initialised == 0


def test_meter_refuses_gpu_without_energy_or_power():
    device = FakeDevice(counter_j=None, average_w=None)
    backend = FakeNvmlBackend([device])
    with pytest.raises(MeterError, match="neither an energy counter nor power"):
        NvmlGpuMeter(backend, 0, device)
    assert backend.initialised == 0


def test_energy_is_monotonic_under_concurrent_polls():
    clock = FakeClock(0.0)
    meter = _meter(FakeDevice(counter_j=None, average_w=lambda t: 100.0 + 50.0 * (t % 2)), clock)
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
    b = open_session(nv)
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


def test_session_init_error_is_translated_and_not_counted():
    nv = FakeNvml(init_error=NVMLError_LibraryNotFound)
    with pytest.raises(NvmlError) as err:
        NvmlSession(nv)
    assert err.value.name == "NVMLError_LibraryNotFound"
    assert open_session_count(nv) == 0


def test_open_session_uses_a_backend_when_given_one():
    backend = FakeNvmlBackend(make_devices(2))
    with open_session(backend) as session:
        assert [d.uuid for d in session.devices()] == [d.uuid for d in backend.devices]
        assert backend.initialised == 1
    assert backend.initialised == 0


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


@pytest.mark.parametrize("kind", ["pynvml", "backend"])
def test_visible_gpus_job_index_follows_cuda_visible_devices(kind):
    if kind == "pynvml":
        nv = FakeNvml(make_gpus(4))
        uuids = [g.uuid for g in nv.gpus]
    else:
        nv = FakeNvmlBackend(make_devices(4))
        uuids = [d.uuid for d in nv.devices]
    gpus = visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert [(g.job_index, g.physical_index) for g in gpus] == [(0, 2), (1, 0)]
    assert gpus[0].uuid == uuids[2]
    by_uuid = visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": uuids[3]})
    assert [g.physical_index for g in by_uuid] == [3]
    prefix = uuids[1][:6]  # "GPU-1a": unique among the four
    assert [g.physical_index for g in visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": prefix})] == [1]
    assert visible_gpus(nv, env={"CUDA_VISIBLE_DEVICES": ""}) == []
    meter = NvmlGpuMeter(nv, gpus[0].job_index, gpus[0])
    assert meter.info.component == "gpu:0"
    assert meter.info.details["uuid"] == uuids[2]
    assert meter.info.details["physical_index"] == 2
    meter.close()
    assert nv.initialised == 0


def test_mig_uuid_is_refused_with_one_sentence():
    nv = FakeNvmlBackend(make_devices(1))
    env = {"CUDA_VISIBLE_DEVICES": "MIG-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"}
    with pytest.raises(MeterError) as err:
        visible_gpus(nv, env=env)
    message = str(err.value)
    assert "MIG-5c89852c" in message and "cannot read the energy" in message
    assert "disable MIG" in message
    assert message.count(". ") == 0


def test_gpu_in_mig_mode_is_refused():
    devices = make_devices(2)
    devices[1].mig = True
    nv = FakeNvmlBackend(devices)
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
        (NvmlError("NVMLError_LibraryNotFound"), "libnvidia-ml.so.1", "Install the NVIDIA driver"),
        (NVMLError_LibraryNotFound(), "libnvidia-ml.so.1", "Install the NVIDIA driver"),
        (NvmlError("NVMLError_DriverNotLoaded"), "driver is not loaded", "modprobe nvidia"),
        (NVMLError_DriverNotLoaded(), "driver is not loaded", "modprobe nvidia"),
        (NvmlError("NVMLError_NoPermission"), "permissions", "/dev/nvidia"),
        (NvmlError("NVMLError_Unknown", "Unknown Error"), "NVMLError_Unknown", "nvidia-smi"),
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
    except NvmlError as exc:
        assert "NVML" in nvml_problem(exc).reason
    else:
        pytest.skip("this machine has a working NVIDIA driver")
