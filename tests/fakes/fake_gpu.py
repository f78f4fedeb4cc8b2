"""A fake NVML backend at the adapter's interface (``wattlab.meters.nvml.GpuDevice``).

Units are wattlab's: W and J. Pass a ``FakeNvmlBackend`` wherever wattlab takes an ``nvml`` /
``pynvml_module`` argument; its sessions yield ``FakeDevice`` objects. Scripted fields
(``average_w``, ``instant_w``, ``counter_j``) may be a number, a list (one value per call, the
last one repeats), a callable of the backend's clock (s), or ``None`` (not reported: no instant
power, no energy counter, no power readings). A scripted value that is an ``NvmlError`` is raised.

With ``state_path`` (or env WATTLAB_FAKE_NVML_STATE) the GPU descriptions and the current power
limits live in a JSON file, so a limit set in one process is seen by another::

    FakeNvmlBackend(make_devices(2), state_path=p)   # writes p
    FakeNvmlBackend(state_path=p)                    # another process: loads p
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from wattlab.meters.nvml import NvmlError

STATE_ENV = "WATTLAB_FAKE_NVML_STATE"


def _scripted(value: Any, clock_s: float) -> Any:
    if callable(value):
        value = value(clock_s)
    elif isinstance(value, list):
        value = value.pop(0) if len(value) > 1 else value[0]
    if isinstance(value, NvmlError):
        raise value
    return value


@dataclass
class FakeDevice:
    """One fake GPU (a ``GpuDevice``). Units: W, J."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H200"
    physical_index: int = 0
    bus_id: str | None = "00000000:18:00.0"
    average_w: Any = 100.0  # nvmlDeviceGetPowerUsage; None = not readable
    instant_w: Any = None  # NVML_FI_DEV_POWER_INSTANT; None = not reported
    counter_j: Any = 0.0  # total-energy counter; None = not supported
    utilization: float | None = 0.0
    temperature: float | None = 35.0  # degrees C; None = not readable
    limit_w: float = 700.0
    default_limit_w: float = 700.0
    min_limit_w: float = 200.0
    max_limit_w: float = 700.0
    limits_supported: bool = True
    mig: bool = False
    set_permission_denied: bool = False
    backend: Any = field(default=None, repr=False, compare=False)

    def _clock(self) -> float:
        return self.backend.clock() if self.backend is not None else 0.0

    def _check_open(self) -> None:
        if self.backend is not None and self.backend.initialised <= 0:
            raise NvmlError("NVMLError_Uninitialized", "Uninitialized")

    def _limits(self) -> None:
        self._check_open()
        if not self.limits_supported:
            raise NvmlError("NVMLError_NotSupported", "Not Supported")
        if self.backend is not None:
            self.backend.refresh_limits()

    def pci_bus_id(self) -> str | None:
        return self.bus_id

    def mig_enabled(self) -> bool:
        return self.mig

    def energy_counter_j(self) -> float | None:
        self._check_open()
        value = _scripted(self.counter_j, self._clock())
        return None if value is None else float(value)

    def instant_power_w(self) -> float | None:
        value = _scripted(self.instant_w, self._clock())
        return None if value is None else float(value)

    def average_power_w(self) -> float | None:
        try:
            value = _scripted(self.average_w, self._clock())
        except NvmlError:
            return None
        return None if value is None else float(value)

    def utilization_percent(self) -> float | None:
        return self.utilization

    def temperature_c(self) -> float | None:
        return self.temperature

    def power_limit_w(self) -> float:
        self._limits()
        return self.limit_w

    def default_power_limit_w(self) -> float:
        self._limits()
        return self.default_limit_w

    def power_limit_range_w(self) -> tuple[float, float]:
        self._limits()
        return self.min_limit_w, self.max_limit_w

    def set_power_limit_w(self, limit_w: float) -> None:
        self._limits()
        if self.backend is not None:
            self.backend.set_calls.append((self.physical_index, float(limit_w)))
        if self.set_permission_denied:
            raise NvmlError("NVMLError_NoPermission", "Insufficient Permissions")
        if not self.min_limit_w <= limit_w <= self.max_limit_w:
            raise NvmlError("NVMLError_InvalidArgument", "Invalid Argument")
        self.limit_w = float(limit_w)
        if self.backend is not None:
            self.backend.save()

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "backend"}
        for key in ("average_w", "instant_w", "counter_j"):
            if callable(data[key]) or isinstance(data[key], list):
                data[key] = 0.0  # scripted values do not travel between processes
        return data


def make_devices(n: int, **overrides: Any) -> list[FakeDevice]:
    """n H200-like GPUs with distinct UUIDs 'GPU-<i>aaaaaaa-...' and bus ids."""
    return [
        FakeDevice(
            uuid=f"GPU-{i}{'a' * 7}-1111-2222-3333-{i:012d}",
            physical_index=i,
            bus_id=f"00000000:{0x18 + i:02X}:00.0",
            **overrides,
        )
        for i in range(n)
    ]


class FakeSession:
    """What ``FakeNvmlBackend.open_session()`` returns; counts itself open until closed."""

    def __init__(self, backend: FakeNvmlBackend) -> None:
        self.backend = backend
        self._closed = False

    @property
    def driver_version(self) -> str | None:
        return self.backend.driver_version

    def devices(self) -> list[FakeDevice]:
        if self._closed:
            raise NvmlError("NVMLError_Uninitialized", "Uninitialized")
        return list(self.backend.devices)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.backend.initialised -= 1

    def __enter__(self) -> FakeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeNvmlBackend:
    """A fake NVML library at the adapter interface. ``initialised`` counts open sessions;
    ``set_calls`` lists every (physical_index, limit_w) set, allowed or not; ``init_error``
    (an NVML error name such as "NVMLError_LibraryNotFound") makes opening a session fail."""

    def __init__(
        self,
        devices: list[FakeDevice] | None = None,
        *,
        state_path: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = lambda: 0.0,
        init_error: str | None = None,
        driver_version: str = "580.159.04",
    ) -> None:
        if state_path is None and os.environ.get(STATE_ENV):
            state_path = os.environ[STATE_ENV]
        self.state_path = Path(state_path) if state_path is not None else None
        if devices is None and self.state_path is not None:
            data = json.loads(self.state_path.read_text())
            devices = [FakeDevice(**d) for d in data["devices"]]
        self.devices: list[FakeDevice] = make_devices(1) if devices is None else devices
        for device in self.devices:
            device.backend = self
        self.clock = clock
        self.init_error = init_error
        self.driver_version = driver_version
        self.initialised = 0
        self.sessions_opened = 0
        self.set_calls: list[tuple[int, float]] = []
        self._lock = threading.Lock()
        self.save()

    def open_session(self) -> FakeSession:
        if self.init_error is not None:
            raise NvmlError(self.init_error, "fake init failure", "nvmlInit")
        self.initialised += 1
        self.sessions_opened += 1
        return FakeSession(self)

    def limits_w(self) -> list[float]:
        """Every GPU's current limit (W), as another process would see it."""
        self.refresh_limits()
        return [d.limit_w for d in self.devices]

    # -- state file -------------------------------------------------------------------------
    def save(self) -> None:
        if self.state_path is None:
            return
        with self._lock:
            tmp = self.state_path.with_name(f"{self.state_path.name}.tmp{os.getpid()}")
            tmp.write_text(json.dumps({"devices": [d.to_json() for d in self.devices]}))
            os.replace(tmp, self.state_path)

    def refresh_limits(self) -> None:
        """Other processes may have changed limits: re-read them from the state file."""
        if self.state_path is None or not self.state_path.exists():
            return
        data = json.loads(self.state_path.read_text())
        for device, saved in zip(self.devices, data["devices"], strict=False):
            device.limit_w = saved["limit_w"]
