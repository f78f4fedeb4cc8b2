"""Read-only GPU readings before a run (power, temperature) through the NVML adapter."""

from __future__ import annotations

from tests.fakes.fake_gpu import FakeNvmlBackend, make_devices
from wattlab.meters.idle import hottest_gpu_c, read_gpu_idle


def test_idle_readings_follow_job_indices_and_close_nvml(monkeypatch):
    devices = make_devices(3)
    for device, (watts, celsius) in zip(devices, [(70, 31), (95.5, 48), (80, 40)], strict=True):
        device.average_w, device.temperature = watts, celsius
    nv = FakeNvmlBackend(devices)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    readings = read_gpu_idle(pynvml=nv)
    assert readings == {
        "gpu:0": {"uuid": devices[2].uuid, "power_w": 80.0, "temperature_c": 40.0},
        "gpu:1": {"uuid": devices[1].uuid, "power_w": 95.5, "temperature_c": 48.0},
    }
    assert list(read_gpu_idle([1], pynvml=nv)) == ["gpu:1"]
    assert hottest_gpu_c(pynvml=nv) == 48.0
    assert nv.initialised == 0 and nv.set_calls == []


def test_unreadable_values_and_no_nvml_give_none_and_empty():
    devices = make_devices(1, temperature=None, average_w=None)
    nv = FakeNvmlBackend(devices)
    assert read_gpu_idle(pynvml=nv) == {
        "gpu:0": {"uuid": devices[0].uuid, "power_w": None, "temperature_c": None}
    }
    assert hottest_gpu_c(pynvml=nv) is None
    broken = FakeNvmlBackend(init_error="NVMLError_LibraryNotFound")
    assert read_gpu_idle(pynvml=broken) == {}
