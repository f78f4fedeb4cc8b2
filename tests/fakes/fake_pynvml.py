"""A thin fake ``pynvml`` (nvidia-ml-py) with the same function, constant and exception names.

Only for testing the adapter itself (``tests/meters/test_meters_nvml.py``): everything above the
adapter is tested with the fake at the adapter's interface, ``tests/fakes/fake_gpu.py``.

Units are NVML's: power in mW, energy in mJ, limits in mW. Each ``FakeGpu`` field that is
scripted (``power_mw``, ``energy_mj``) may be a number, a list (one value per call, the last one
repeats) or a callable of the fake's clock (``FakeClock``). ``energy_mj=None`` makes the energy
counter unsupported (NVMLError_NotSupported), ``mig_current=1`` turns MIG mode on,
``set_permission_denied=True`` makes nvmlDeviceSetPowerManagementLimit raise NoPermission,
``instant_power_mw`` (scripted like power_mw) answers nvmlDeviceGetFieldValues for
NVML_FI_DEV_POWER_INSTANT (None: the field is not reported, as on older GPUs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_FI_DEV_POWER_INSTANT = 186
NVML_VALUE_TYPE_UNSIGNED_INT = 1

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(code)`` returns the subclass for that code."""

    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__()

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name: str, code: int) -> type:
    def new(cls, *args):
        obj = Exception.__new__(cls)
        obj.value = code
        return obj

    cls = type(name, (NVMLError,), {"__new__": new, "__init__": lambda self, *a: None})
    NVMLError._valClassMapping[code] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _subclass("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _subclass("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_DriverNotLoaded = _subclass("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _subclass("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _subclass("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _subclass("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


@dataclass
class FakeGpu:
    """One fake GPU. Units: mW, mJ (NVML's)."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H200"
    pci_bus_id: str = "00000000:00:00.0"
    power_mw: Any = 100_000  # number, list (one per call) or callable(clock_s)
    energy_mj: Any = 0  # number, list or callable(clock_s); None = counter unsupported
    power_supported: bool = True
    instant_power_mw: Any = None  # NVML_FI_DEV_POWER_INSTANT; None = not reported
    limit_mw: int = 700_000
    default_limit_mw: int = 700_000
    min_limit_mw: int = 200_000
    max_limit_mw: int = 700_000
    mig_current: int | None = 0  # None = MIG not supported by this GPU
    utilization_gpu: int = 0
    temperature_c: int | None = 35  # None = not supported
    set_permission_denied: bool = False


def make_gpus(n: int, **overrides: Any) -> list[FakeGpu]:
    """n H200-like GPUs with distinct UUIDs 'GPU-<i>aaaaaaa-...' and bus ids."""
    return [
        FakeGpu(
            uuid=f"GPU-{i}{'a' * 7}-1111-2222-3333-{i:012d}",
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            **overrides,
        )
        for i in range(n)
    ]


@dataclass
class _Handle:
    index: int


def _scripted(value: Any, clock_s: float) -> Any:
    if callable(value):
        return value(clock_s)
    if isinstance(value, list):
        return value.pop(0) if len(value) > 1 else value[0]
    return value


@dataclass
class FakeNvml:
    """The fake module. Attribute names match nvidia-ml-py's ``pynvml``."""

    gpus: list[FakeGpu] | None = None
    clock: Callable[[], float] = field(default=lambda: 0.0)
    init_error: type | None = None  # e.g. NVMLError_LibraryNotFound: nvmlInit raises it
    driver_version: str = "580.159.04"

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Unknown = NVMLError_Unknown
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_DEVICE_MIG_DISABLE = NVML_DEVICE_MIG_DISABLE
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_FI_DEV_POWER_INSTANT = NVML_FI_DEV_POWER_INSTANT

    def __post_init__(self) -> None:
        if self.gpus is None:
            self.gpus = make_gpus(1)
        self.initialised = 0  # nvmlInit calls not yet shut down
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    # -- plumbing ---------------------------------------------------------------------------
    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def _check_init(self) -> None:
        if self.initialised <= 0:
            raise NVMLError_Uninitialized()

    def _gpu(self, handle: Any) -> FakeGpu:
        self._check_init()
        assert self.gpus is not None
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return self.gpus[handle.index]

    def set_calls(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Every call of a function that changes GPU settings."""
        return [c for c in self.calls if c[0].startswith("nvmlDeviceSet")]

    # -- library ----------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._record("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._record("nvmlShutdown")
        self._check_init()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        assert self.gpus is not None
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check_init()
        assert self.gpus is not None
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        self._check_init()
        for i, gpu in enumerate(self.gpus or []):
            if gpu.uuid == uuid:
                return _Handle(i)
        raise NVMLError(13)  # NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._gpu(handle)
        return handle.index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(busId=gpu.pci_bus_id, busIdLegacy=gpu.pci_bus_id)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle)
        if gpu.mig_current is None:
            raise NVMLError_NotSupported()
        return [gpu.mig_current, gpu.mig_current]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.energy_mj is None:
            raise NVMLError_NotSupported()
        return int(_scripted(gpu.energy_mj, self.clock()))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        if not gpu.power_supported:
            raise NVMLError_NotSupported()
        value = _scripted(gpu.power_mw, self.clock())
        if isinstance(value, type) and issubclass(value, NVMLError):
            raise value()
        return int(value)

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list[SimpleNamespace]:
        """Only NVML_FI_DEV_POWER_INSTANT is known; other ids come back NOT_SUPPORTED."""
        gpu = self._gpu(handle)
        values = []
        for field_id in field_ids:
            ret, mw = NVML_ERROR_NOT_SUPPORTED, 0
            if field_id == NVML_FI_DEV_POWER_INSTANT and gpu.instant_power_mw is not None:
                ret, mw = NVML_SUCCESS, int(_scripted(gpu.instant_power_mw, self.clock()))
            values.append(
                SimpleNamespace(
                    fieldId=field_id,
                    nvmlReturn=ret,
                    valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                    value=SimpleNamespace(uiVal=mw),
                )
            )
        return values

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(handle).utilization_gpu, memory=0)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._gpu(handle)
        if sensor != 0 or gpu.temperature_c is None:
            raise NVMLError_NotSupported()
        return gpu.temperature_c

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return self._gpu(handle).limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self.nvmlDeviceGetPowerManagementLimit(handle)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        return self._gpu(handle).default_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle)
        return [gpu.min_limit_mw, gpu.max_limit_mw]

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        self._record("nvmlDeviceSetPowerManagementLimit", handle.index, limit)
        gpu = self._gpu(handle)
        if gpu.set_permission_denied:
            raise NVMLError_NoPermission()
        if not gpu.min_limit_mw <= limit <= gpu.max_limit_mw:
            raise NVMLError_InvalidArgument()
        gpu.limit_mw = int(limit)
