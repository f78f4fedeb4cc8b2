"""Idle readings before a run: power and temperature of each visible GPU, read-only."""

from __future__ import annotations

import pytest

from tests.fakes.fake_gpu import FakeNvmlBackend, make_devices
from wattlab.meters.idle import hottest_gpu_c, read_gpu_idle


@pytest.fixture(autouse=True)
def _all_gpus_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_reads_power_and_temperature_per_gpu() -> None:
    devices = make_devices(2)
    devices[0].average_w, devices[0].temperature = 81.5, 38.0
    devices[1].average_w, devices[1].temperature = 95.0, 44.0
    backend = FakeNvmlBackend(devices)
    idle = read_gpu_idle(nvml=backend)
    assert idle == {
        "gpu:0": {"uuid": devices[0].uuid, "power_w": 81.5, "temperature_c": 38.0},
        "gpu:1": {"uuid": devices[1].uuid, "power_w": 95.0, "temperature_c": 44.0},
    }
    assert list(read_gpu_idle([1], nvml=backend)) == ["gpu:1"]
    assert hottest_gpu_c(nvml=backend) == 44.0
    assert [d.limit_w for d in devices] == [700.0, 700.0]  # nothing was changed


def test_unreadable_values_are_none_and_no_nvml_is_empty() -> None:
    devices = make_devices(1)
    devices[0].average_w, devices[0].temperature = None, None
    idle = read_gpu_idle(nvml=FakeNvmlBackend(devices))
    assert idle["gpu:0"]["power_w"] is None and idle["gpu:0"]["temperature_c"] is None
    assert hottest_gpu_c(nvml=FakeNvmlBackend(devices)) is None
    assert read_gpu_idle(nvml=FakeNvmlBackend(init_error="NVML_ERROR_LIBRARY_NOT_FOUND")) == {}


def test_the_host_load_is_read_beside_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before a run the host's 1-minute load average is kept too (issue 49: a comparison gives
    each side's load), under "host", which adds no GPU power or temperature."""
    import os

    from wattlab.experiment.db.record import idle_columns
    from wattlab.meters.idle import read_before_run

    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 1.0, 0.5))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    devices = make_devices(1)
    devices[0].average_w, devices[0].temperature = 70.0, 35.0
    before = read_before_run(nvml=FakeNvmlBackend(devices))
    assert before["host"] == {"load_1min": 1.25, "cpus": 2}
    columns = idle_columns(before)
    assert columns["idle_power_w"] == 70.0 and columns["idle_temperature_c"] == 35.0
    assert read_before_run(nvml=FakeNvmlBackend([])) == {"host": {"load_1min": 1.25, "cpus": 2}}
