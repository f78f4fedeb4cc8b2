"""The run row's idle columns, from the GPU readings taken before the run."""

from __future__ import annotations

from tests.fakes.fake_gpu import FakeNvmlBackend, make_devices
from wattlab.experiment.db.record import idle_columns
from wattlab.meters.idle import read_gpu_idle


def test_idle_columns_sum_the_power_and_keep_the_hottest_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    devices = make_devices(2)
    devices[0].average_w, devices[0].temperature = 80.0, 38.0
    devices[1].average_w, devices[1].temperature = 120.0, 51.0
    backend = FakeNvmlBackend(devices)
    columns = idle_columns(read_gpu_idle(nvml=backend))
    assert columns["idle_power_w"] == 200.0 and columns["idle_temperature_c"] == 51.0
    assert set(columns["idle_json"]) == {"gpu:0", "gpu:1"}
    assert backend.initialised == 0  # every session was closed
    assert idle_columns({}) == {} and idle_columns(None) == {}
    devices[1].average_w, devices[1].temperature = None, None
    columns = idle_columns(read_gpu_idle(nvml=backend))
    assert columns["idle_power_w"] == 80.0 and columns["idle_temperature_c"] == 38.0


def test_a_cpu_run_keeps_the_hosts_load_and_no_gpu_reading(monkeypatch):
    """A run on the CPU reads no GPU, but keeps the host's load average before it (issue 49):
    its GPU columns stay empty."""
    import os

    from wattlab.experiment.runs.runner import read_idle
    from wattlab.train.config import RunConfig

    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.25, 0.1))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    before = read_idle(RunConfig(model="resnet18", device="cpu", epochs=1))
    assert before == {"host": {"load_1min": 0.5, "cpus": 4}}
    columns = idle_columns(before)
    assert columns["idle_power_w"] is None and columns["idle_temperature_c"] is None
