"""GPU readings before each run: power and temperature, read-only, through the NVML adapter."""

from __future__ import annotations

from dataclasses import dataclass

from tests.fakes.fake_gpu import FakeDevice, FakeNvmlBackend
from wattlab.experiment.worker import idle_columns
from wattlab.meters.idle import hottest_gpu_c, read_gpu_idle


@dataclass
class HotDevice(FakeDevice):
    celsius: float | None = 40.0

    def temperature_c(self) -> float | None:
        return self.celsius


def test_idle_readings_per_gpu_and_their_columns(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    backend = FakeNvmlBackend(
        [
            HotDevice(uuid="GPU-a", physical_index=0, average_w=80.0, celsius=38.0),
            HotDevice(uuid="GPU-b", physical_index=1, average_w=120.0, celsius=51.0),
        ]
    )
    idle = read_gpu_idle(nvml=backend)
    assert idle == {
        "gpu:0": {"uuid": "GPU-a", "power_w": 80.0, "temperature_c": 38.0},
        "gpu:1": {"uuid": "GPU-b", "power_w": 120.0, "temperature_c": 51.0},
    }
    assert list(read_gpu_idle([1], nvml=backend)) == ["gpu:1"]
    assert hottest_gpu_c(nvml=backend) == 51.0
    columns = idle_columns(idle)
    assert columns["idle_power_w"] == 200.0 and columns["idle_temperature_c"] == 51.0
    assert backend.set_calls == []  # nothing was changed
    assert backend.initialised == 0  # every session was closed


def test_no_nvml_or_no_temperature_gives_none_not_an_error(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert read_gpu_idle(nvml=FakeNvmlBackend(init_error="NVMLError_LibraryNotFound")) == {}
    plain = FakeNvmlBackend([FakeDevice(average_w=None)])
    assert read_gpu_idle(nvml=plain) == {
        "gpu:0": {"uuid": FakeDevice().uuid, "power_w": None, "temperature_c": None}
    }
    assert hottest_gpu_c(nvml=plain) is None
    assert idle_columns({}) == {}
