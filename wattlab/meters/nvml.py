"""NVIDIA GPUs through NVML (the nvidia-ml-py package, imported as ``pynvml``): the one adapter.

Everything that talks to NVML goes through this module: the GPU energy meter here and the
power-limit sessions of ``wattlab.power_limits`` both use ``NvmlDevice`` (uuid, name, energy,
power, limits, set limit). NVML speaks milliwatts and millijoules; ``NvmlDevice`` converts to W
and J once, and nothing outside it sees NVML units. NVML's exceptions become ``NvmlError`` (one
class, carrying NVML's error name), so no caller needs the pynvml module to catch them.

Every function takes an ``nvml`` argument: None (import the real ``pynvml`` lazily, never at
import time), the ``pynvml`` module or a fake of it, or a backend object with an
``open_session()`` method whose session yields ``GpuDevice`` objects (the fake at this interface
in ``tests/fakes/fake_gpu.py``).

Energy comes from one of two paths:

* **counter** (provenance ``measured``): ``nvmlDeviceGetTotalEnergyConsumption``, a millijoule
  counter kept by the driver since it loaded (Volta and newer). The meter reports the counter's
  update period as ``update_period_s`` (``COUNTER_UPDATE_PERIOD_S``); the monitor adds that
  period at each end of a window as the counter's error. ``poll()`` does not read the counter
  (a read is slow next to a power reading); windows read it at their ends.
* **sampled** (provenance ``sampled``): where the counter is not supported (or the caller forces
  it), power readings are integrated with the trapezoid rule at every ``poll()`` and at every
  ``energy_j()`` call; ``sample_error_j()`` states the trapezoid's bracket. Power is
  NVML_FI_DEV_POWER_INSTANT where the driver reports it, else ``nvmlDeviceGetPowerUsage``,
  which on Ampere and newer is a trailing 1 s average and so smears short bursts
  (docs/results-h200.md has how much, on an H200).

Job indices follow ``CUDA_VISIBLE_DEVICES`` as CUDA reads it (see ``parse_cuda_visible_devices``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from wattlab.errors import MeterError
from wattlab.meters.base import GPU, MeterInfo, MeterProblem, Provenance

# The H200's total-energy counter was observed to change about every 100 ms.
COUNTER_UPDATE_PERIOD_S = 0.1
# The sampled path is only as fine as the sampler's interval (the monitor polls every ~100 ms).
SAMPLED_UPDATE_PERIOD_S = 0.1

# NVML field id of the instantaneous board power (mW); nvmlDeviceGetPowerUsage is instead a
# trailing one-second average on Ampere (except GA100) and newer GPUs.
NVML_FI_DEV_POWER_INSTANT = 186
POWER_SOURCES = ("auto", "instant", "average")
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t: the GPU die

_REFCOUNT_LOCK = threading.Lock()
# id(module) -> [module, open sessions]; holding the module keeps its id from being reused.
_REFCOUNTS: dict[int, list[Any]] = {}


class NvmlError(Exception):
    """An NVML call failed. ``name`` is nvidia-ml-py's exception class name
    (``"NVMLError_NoPermission"``, ``"NVMLError_NotSupported"``, ...)."""

    def __init__(self, name: str, detail: str = "", call: str = "") -> None:
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name
        self.detail = detail
        self.call = call

    @property
    def no_permission(self) -> bool:
        return self.name == "NVMLError_NoPermission"

    @property
    def not_supported(self) -> bool:
        return self.name in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")


def load_pynvml() -> Any:
    """Import the real ``pynvml`` module (nvidia-ml-py). Raises ImportError when missing."""
    import pynvml

    return pynvml


def _text(value: object) -> str:
    """NVML strings arrive as str (new nvidia-ml-py) or bytes (old); return str."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _call(pm: Any, fn_name: str, *args: Any) -> Any:
    """``pm.<fn_name>(*args)``, with NVML's exceptions turned into NvmlError."""
    try:
        fn = getattr(pm, fn_name)
    except AttributeError:
        raise NvmlError("NVMLError_FunctionNotFound", f"pynvml has no {fn_name}", fn_name) from None
    try:
        return fn(*args)
    except pm.NVMLError as exc:
        raise NvmlError(type(exc).__name__, str(exc), fn_name) from exc


def _mw_to_w(value: object) -> float:
    return float(value) / 1000.0  # type: ignore[arg-type]


def _w_to_mw(value_w: float) -> int:
    return round(value_w * 1000)


@runtime_checkable
class GpuDevice(Protocol):
    """One GPU as the rest of wattlab sees it. Units: W, J. Methods that must succeed raise
    NvmlError; optional readings return None when NVML cannot give them."""

    physical_index: int  # NVML's index (PCI bus order)
    uuid: str  # "GPU-8932f937-..."
    name: str  # "NVIDIA H200"

    def pci_bus_id(self) -> str | None: ...

    def mig_enabled(self) -> bool: ...

    def energy_counter_j(self) -> float | None:
        """The driver's total-energy counter (J since the driver loaded); None where the GPU
        has none (NVMLError_NotSupported). Other failures raise NvmlError."""
        ...

    def instant_power_w(self) -> float | None: ...

    def average_power_w(self) -> float | None: ...

    def utilization_percent(self) -> float | None: ...

    def power_limit_w(self) -> float: ...

    def default_power_limit_w(self) -> float: ...

    def power_limit_range_w(self) -> tuple[float, float]: ...

    def set_power_limit_w(self, limit_w: float) -> None: ...


class NvmlDevice:
    """The real ``GpuDevice``: one NVML device handle. Valid while an NvmlSession is open."""

    def __init__(self, pynvml: Any, handle: Any, physical_index: int) -> None:
        self._pm = pynvml
        self.handle = handle
        self.physical_index = physical_index
        self.uuid = _text(_call(pynvml, "nvmlDeviceGetUUID", handle))
        self.name = _text(_call(pynvml, "nvmlDeviceGetName", handle))

    def __repr__(self) -> str:
        return f"NvmlDevice({self.physical_index}, {self.uuid!r}, {self.name!r})"

    def _optional(self, fn_name: str, *args: Any) -> Any:
        try:
            return _call(self._pm, fn_name, self.handle, *args)
        except NvmlError:
            return None

    def pci_bus_id(self) -> str | None:
        pci = self._optional("nvmlDeviceGetPciInfo")
        return None if pci is None else _text(pci.busId)

    def mig_enabled(self) -> bool:
        """True when the GPU's current MIG mode is enabled; GPUs without MIG give False."""
        modes = self._optional("nvmlDeviceGetMigMode")
        return modes is not None and int(modes[0]) == 1

    def energy_counter_j(self) -> float | None:
        try:
            return _mw_to_w(_call(self._pm, "nvmlDeviceGetTotalEnergyConsumption", self.handle))
        except NvmlError as exc:
            if exc.not_supported:
                return None
            raise

    def instant_power_w(self) -> float | None:
        """NVML_FI_DEV_POWER_INSTANT in W, or None where the driver does not report it."""
        fields = self._optional("nvmlDeviceGetFieldValues", [NVML_FI_DEV_POWER_INSTANT])
        if not fields:
            return None
        field = fields[0]
        if int(field.nvmlReturn) != 0:  # NVML_SUCCESS
            return None
        # the union member depends on valueType (drivers differ): NVML's nvmlValueType_t order
        member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
        try:
            value = getattr(field.value, member[int(field.valueType)])
        except (IndexError, AttributeError):
            return None
        return _mw_to_w(value)

    def average_power_w(self) -> float | None:
        """nvmlDeviceGetPowerUsage in W (a trailing 1 s average on Ampere and newer)."""
        value = self._optional("nvmlDeviceGetPowerUsage")
        return None if value is None else _mw_to_w(value)

    def utilization_percent(self) -> float | None:
        rates = self._optional("nvmlDeviceGetUtilizationRates")
        return None if rates is None else float(rates.gpu)

    def temperature_c(self) -> float | None:
        """The GPU die temperature in degrees C (read-only), None when NVML does not say."""
        value = self._optional("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        return None if value is None else float(value)

    def power_limit_w(self) -> float:
        return _mw_to_w(_call(self._pm, "nvmlDeviceGetPowerManagementLimit", self.handle))

    def default_power_limit_w(self) -> float:
        return _mw_to_w(_call(self._pm, "nvmlDeviceGetPowerManagementDefaultLimit", self.handle))

    def power_limit_range_w(self) -> tuple[float, float]:
        low, high = _call(self._pm, "nvmlDeviceGetPowerManagementLimitConstraints", self.handle)
        return _mw_to_w(low), _mw_to_w(high)

    def set_power_limit_w(self, limit_w: float) -> None:
        """Set the power limit (NVML takes whole milliwatts). Needs root; raises NvmlError."""
        _call(self._pm, "nvmlDeviceSetPowerManagementLimit", self.handle, _w_to_mw(limit_w))


def _pynvml_key(pynvml: Any) -> int:
    return id(pynvml)


class NvmlSession:
    """One reference to an initialised NVML library; ``nvmlInit`` on the first open reference,
    ``nvmlShutdown`` when the last one closes. Opening happens in the constructor (NvmlError on
    failure); use it as a context manager or call ``close()`` (idempotent)."""

    def __init__(self, pynvml: Any = None) -> None:
        self.pynvml = pynvml if pynvml is not None else load_pynvml()
        self._closed = True
        key = _pynvml_key(self.pynvml)
        with _REFCOUNT_LOCK:
            entry = _REFCOUNTS.get(key)
            if entry is None:
                _call(self.pynvml, "nvmlInit")  # raises before we count anything
                _REFCOUNTS[key] = [self.pynvml, 1]
            else:
                entry[1] += 1
        self._closed = False
        self._driver_version: str | None = None

    @property
    def driver_version(self) -> str | None:
        """The NVIDIA driver version string, or None when NVML does not say."""
        if self._driver_version is None:
            try:
                self._driver_version = _text(_call(self.pynvml, "nvmlSystemGetDriverVersion"))
            except NvmlError:
                return None
        return self._driver_version

    def devices(self) -> list[NvmlDevice]:
        """Every GPU NVML sees, in NVML index order."""
        pm = self.pynvml
        return [
            NvmlDevice(pm, _call(pm, "nvmlDeviceGetHandleByIndex", index), index)
            for index in range(int(_call(pm, "nvmlDeviceGetCount")))
        ]

    def close(self) -> None:
        """Drop this reference; shut NVML down when it was the last one. Idempotent."""
        if self._closed:
            return
        self._closed = True
        key = _pynvml_key(self.pynvml)
        with _REFCOUNT_LOCK:
            entry = _REFCOUNTS.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del _REFCOUNTS[key]
                try:
                    _call(self.pynvml, "nvmlShutdown")
                except NvmlError:
                    pass

    def __enter__(self) -> NvmlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_session(nvml: Any = None) -> Any:
    """Open a session on ``nvml``: None (the real pynvml), a pynvml module (or fake), or a
    backend with ``open_session()``. The session has ``devices()``, ``driver_version`` and
    ``close()``, and is a context manager. Raises NvmlError (or ImportError for None)."""
    if nvml is not None and callable(getattr(nvml, "open_session", None)):
        return nvml.open_session()
    return NvmlSession(nvml)


def open_session_count(pynvml: Any) -> int:
    """How many NvmlSession references are open on this module (for tests and diagnostics)."""
    with _REFCOUNT_LOCK:
        entry = _REFCOUNTS.get(_pynvml_key(pynvml))
        return 0 if entry is None else int(entry[1])


@dataclass(frozen=True)
class GpuHandle:
    """A GPU this job can see: its job index (CUDA's numbering) and the device."""

    job_index: int  # 0 = the first GPU in CUDA_VISIBLE_DEVICES
    device: GpuDevice

    @property
    def physical_index(self) -> int:
        return self.device.physical_index

    @property
    def uuid(self) -> str:
        return self.device.uuid

    @property
    def name(self) -> str:
        return self.device.name


@dataclass(frozen=True)
class VisibleSelection:
    """Result of applying CUDA_VISIBLE_DEVICES to the GPUs NVML sees."""

    physical_indices: list[int]  # in job order
    ignored: list[str]  # entries CUDA ignores (invalid, unknown, duplicate) and all after them
    raw: str | None  # the variable's value, None when unset


def parse_cuda_visible_devices(value: str | None, uuids: Sequence[str]) -> VisibleSelection:
    """Map CUDA_VISIBLE_DEVICES onto NVML's device list, the way CUDA reads it.

    ``uuids[i]`` is the UUID of NVML device ``i``. Unset means every GPU; the empty string means
    none. Entries are integer indices or ``GPU-<uuid>`` (the full UUID or a prefix that matches
    exactly one GPU). Like CUDA, the first entry that names no GPU (``-1``, an unknown index or
    UUID, an ambiguous prefix, a duplicate) ends the list: it and everything after it is ignored
    and returned in ``ignored``. A ``MIG-`` entry raises MeterError, because NVML cannot read the
    energy of one MIG instance.

    Caveat: CUDA numbers devices fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; NVML
    uses PCI bus order. The two agree on machines with identical GPUs (ties go to the bus order).
    """
    if value is None:
        return VisibleSelection(list(range(len(uuids))), [], None)
    tokens = [t.strip() for t in value.split(",")]
    if value.strip() == "":
        return VisibleSelection([], [], value)
    chosen: list[int] = []
    for position, token in enumerate(tokens):
        if token.upper().startswith("MIG-"):
            raise MeterError(
                f"CUDA_VISIBLE_DEVICES names the MIG instance {token!r}, but NVML cannot read "
                "the energy of a single MIG instance; disable MIG and make the whole GPU "
                "visible (by index or GPU-<uuid>) to meter it."
            )
        index: int | None = None
        if token.isdigit():
            candidate = int(token)
            if candidate < len(uuids):
                index = candidate
        elif token.upper().startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.lower().startswith(token.lower())]
            if len(matches) == 1:
                index = matches[0]
        if index is None or index in chosen:
            return VisibleSelection(chosen, tokens[position:], value)
        chosen.append(index)
    return VisibleSelection(chosen, [], value)


def select_visible_gpus(
    nvml: Any = None, env: Mapping[str, str] | None = None
) -> tuple[list[GpuHandle], VisibleSelection]:
    """The GPUs this job sees (job order) and how CUDA_VISIBLE_DEVICES was read.

    Opens (and closes) its own session; hold a session yourself while you use the devices.
    Raises MeterError for MIG (a MIG UUID, or a visible GPU with MIG mode enabled).
    """
    env = os.environ if env is None else env
    with open_session(nvml) as session:
        devices = session.devices()
        selection = parse_cuda_visible_devices(
            env.get("CUDA_VISIBLE_DEVICES"), [d.uuid for d in devices]
        )
        gpus: list[GpuHandle] = []
        for job_index, physical in enumerate(selection.physical_indices):
            device = devices[physical]
            if device.mig_enabled():
                raise MeterError(
                    f"GPU {physical} ({device.name}, {device.uuid}) has MIG mode enabled, and "
                    "NVML cannot read the energy of a single MIG instance; disable MIG "
                    f"(sudo nvidia-smi -i {physical} -mig 0) to meter the whole GPU."
                )
            gpus.append(GpuHandle(job_index, device))
        return gpus, selection


def visible_gpus(nvml: Any = None, env: Mapping[str, str] | None = None) -> list[GpuHandle]:
    """The GPUs this job sees, honouring CUDA_VISIBLE_DEVICES; job index 0 is the first.

    See ``parse_cuda_visible_devices`` for the rules; raises MeterError for MIG.
    """
    return select_visible_gpus(nvml, env)[0]


def devices_by_uuid(session: Any) -> dict[str, GpuDevice]:
    """Every GPU of an open session, by UUID (for the power-limit journal)."""
    return {device.uuid: device for device in session.devices()}


def nvml_problem(exc: BaseException, component: str = "gpu") -> MeterProblem:
    """Turn a failure to open NVML (or a GPU) into a MeterProblem with a reason and a fix."""
    fallback = "none: GPU energy is not metered"
    if isinstance(exc, ImportError):
        return MeterProblem(
            component,
            "the nvidia-ml-py package (module pynvml) is not installed.",
            "Install it with `pip install nvidia-ml-py`.",
            fallback,
        )
    name = exc.name if isinstance(exc, NvmlError) else type(exc).__name__
    if name == "NVMLError_LibraryNotFound":
        return MeterProblem(
            component,
            "the NVML library (libnvidia-ml.so.1) was not found, so no NVIDIA driver is "
            "installed or visible.",
            "Install the NVIDIA driver (nvidia-smi must work), or in a container run with the "
            "NVIDIA container toolkit (--gpus all).",
            fallback,
        )
    if name == "NVMLError_DriverNotLoaded":
        return MeterProblem(
            component,
            "the NVIDIA kernel driver is not loaded.",
            "Load it (sudo modprobe nvidia) or reboot after installing the driver; nvidia-smi "
            "must work.",
            fallback,
        )
    if name == "NVMLError_NoPermission":
        return MeterProblem(
            component,
            "NVML refused access (insufficient permissions).",
            "Run as a user who may open /dev/nvidia* (often the 'video' group), or as root.",
            fallback,
        )
    return MeterProblem(
        component,
        f"NVML failed: {name}: {exc}.",
        "Check that nvidia-smi works for this user.",
        fallback,
    )


class NvmlGpuMeter:
    """One GPU's energy through NVML. Units: J for energy, W for power.

    ``gpu`` is a ``GpuHandle`` or a ``GpuDevice``. The meter holds its own session reference
    on ``nvml`` until ``close()``. ``power_source`` picks the power reading used by power_w()
    and the sampled path: "instant" (NVML_FI_DEV_POWER_INSTANT), "average"
    (nvmlDeviceGetPowerUsage, a trailing 1 s average on Ampere and newer, so a sampled window
    lags by about a second) or "auto" (instant where the driver reports it). ``clock`` is the
    monotonic time source (s), a seam for tests.
    """

    def __init__(
        self,
        nvml: Any,
        job_index: int,
        gpu: GpuHandle | GpuDevice,
        force_sampled: bool = False,
        *,
        power_source: str = "auto",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if power_source not in POWER_SOURCES:
            raise MeterError(
                f"power_source {power_source!r} is not one of {', '.join(POWER_SOURCES)}."
            )
        self._session = open_session(nvml)
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self.job_index = job_index
        self.device: GpuDevice = gpu.device if isinstance(gpu, GpuHandle) else gpu
        self.read_errors = 0  # failed power reads in poll(); the trapezoid bridges the gap
        self._instant = False
        try:
            if power_source != "average":
                self._instant = self.device.instant_power_w() is not None
                if power_source == "instant" and not self._instant:
                    raise MeterError(
                        f"GPU {job_index} does not report instantaneous power "
                        "(NVML_FI_DEV_POWER_INSTANT); use power_source 'average' or 'auto'."
                    )
            self._open(force_sampled)
        except BaseException:
            self._session.close()
            raise

    # -- set-up -----------------------------------------------------------------------------
    def _optional_w(self, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except NvmlError:
            return None

    def _open(self, force_sampled: bool) -> None:
        device = self.device
        name, uuid = device.name, device.uuid
        limit_w = self._optional_w(device.power_limit_w)
        default_w = self._optional_w(device.default_power_limit_w)
        limit_range_w = self._optional_w(device.power_limit_range_w)

        self._counter = not force_sampled
        reason = "forced by the caller" if force_sampled else ""
        if self._counter:
            raw_j = device.energy_counter_j()
            if raw_j is None:
                self._counter = False
                reason = "the NVML energy counter is not supported on this GPU"
            else:
                self._raw_j = raw_j
        self._acc_j_counter = 0.0  # counter path: joules since open (handles driver resets)

        # Sampled path state: last sample (time s, power W), integral J, bracket J.
        self._acc_j = 0.0
        self._bracket_j = 0.0
        self._last_t: float | None = None
        self._last_p: float | None = None
        if not self._counter:
            now = self._clock()
            power = self._read_power()
            if power is None:
                raise MeterError(
                    f"GPU {self.job_index} ({name}) reports neither an energy "
                    "counter nor power readings through NVML, so it cannot be metered."
                )
            self._last_t, self._last_p = now, power

        details: dict[str, object] = {
            "name": name,
            "uuid": uuid,
            "pci_bus_id": device.pci_bus_id(),
            "driver": self._session.driver_version,
            "physical_index": int(device.physical_index),
            "power_limit_w": limit_w,
            "default_power_limit_w": default_w,
            "limit_min_w": limit_range_w[0] if limit_range_w else None,
            "limit_max_w": limit_range_w[1] if limit_range_w else None,
            "energy_source": "counter" if self._counter else "power-sampling",
            "power_source": (
                "NVML_FI_DEV_POWER_INSTANT"
                if self._instant
                else "nvmlDeviceGetPowerUsage (1 s average on Ampere and newer)"
            ),
        }
        if self._counter:
            provenance = Provenance.MEASURED
            description = f"{name} ({uuid}): NVML total-energy counter"
            period = COUNTER_UPDATE_PERIOD_S
        else:
            provenance = Provenance.SAMPLED
            details["sampling_reason"] = reason
            description = (
                f"{name} ({uuid}): NVML power readings integrated with the trapezoid rule "
                f"({reason})"
            )
            period = SAMPLED_UPDATE_PERIOD_S
        self.info = MeterInfo(
            component=f"{GPU}:{self.job_index}",
            kind=GPU,
            provenance=provenance,
            source="nvml",
            description=description,
            update_period_s=period,
            details=details,
        )

    # -- readings ---------------------------------------------------------------------------
    @property
    def sampled(self) -> bool:
        """True on the power-sampling path (no energy counter)."""
        return not self._counter

    def _read_power(self) -> float | None:
        if self._instant:
            power = self.device.instant_power_w()
            if power is not None:
                return power
        return self.device.average_power_w()

    def _sample_locked(self) -> None:
        """Add the trapezoid from the last sample to a fresh one. Caller holds the lock."""
        now = self._clock()
        power = self._read_power()
        if power is None:
            self.read_errors += 1
            return
        assert self._last_t is not None and self._last_p is not None
        dt = now - self._last_t
        if dt > 0:
            self._acc_j += (self._last_p + power) / 2.0 * dt
            self._bracket_j += abs(power - self._last_p) * dt / 2.0
        self._last_t, self._last_p = now, power

    def _update_counter_locked(self) -> None:
        try:
            raw_j = self.device.energy_counter_j()
        except NvmlError as exc:
            raise MeterError(
                f"reading the NVML energy counter of gpu:{self.job_index} failed ({exc}); "
                "check that the GPU is still present."
            ) from exc
        if raw_j is None:
            raise MeterError(
                f"the NVML energy counter of gpu:{self.job_index} stopped answering "
                "(NVMLError_NotSupported); check that the GPU is still present."
            )
        # The counter starts at driver load; a smaller value means the driver restarted.
        self._acc_j_counter += raw_j - self._raw_j if raw_j >= self._raw_j else raw_j
        self._raw_j = raw_j

    def energy_j(self) -> float:
        """Cumulative GPU energy since the meter was opened. Units: J. Never decreases."""
        with self._lock:
            if self._counter:
                if not self._closed:
                    self._update_counter_locked()
                return self._acc_j_counter
            if not self._closed:
                self._sample_locked()
            return self._acc_j

    def power_w(self) -> float | None:
        """Current board power: NVML_FI_DEV_POWER_INSTANT where the driver reports it (and
        power_source allows), else nvmlDeviceGetPowerUsage. Units: W. None if unreadable."""
        return self._read_power()

    def poll(self) -> None:
        """Sampler tick: integrate power on the sampled path. A no-op on the counter path:
        reading the counter costs about 4 ms on an H200 (power about 5 us), and energy_j()
        reads it when it is needed."""
        if self._counter:
            return
        with self._lock:
            if not self._closed:
                self._sample_locked()

    def relative_uncertainty(self) -> float:
        """0.0: the counter's error is its update period at each end (the monitor adds it);
        the sampled path's error is ``sample_error_j()``."""
        return 0.0

    def sample_error_j(self) -> float:
        """Trapezoid bracket of the sampled path: sum of |P[i+1] - P[i]| * dt / 2. Units: J.
        Always 0.0 on the counter path."""
        with self._lock:
            return self._bracket_j

    def utilization_percent(self) -> float | None:
        """GPU utilisation over NVML's last sample period (nvmlDeviceGetUtilizationRates().gpu).
        Units: percent, 0-100. None if unreadable."""
        return self.device.utilization_percent()

    def close(self) -> None:
        """Release the session reference. Idempotent; energy_j() then returns the last value."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._session.close()
