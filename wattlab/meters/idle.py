"""Read-only readings before a run: each GPU's power draw and temperature, and the host's load
average, right now.

A sweep records them before every run (the reference study's habit), so a run that started on
a hot or busy GPU can be recognised, and a cool-down can wait for a temperature. Nothing here
changes a GPU setting. The temperature is an optional reading of the NVML adapter
(``temperature_c``); a device without it reports None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict


class GpuIdle(TypedDict):
    """One GPU's state before a run: its UUID, power (W) and temperature (C) when readable."""

    uuid: str
    power_w: float | None
    temperature_c: float | None


def read_gpu_idle(job_indices: list[int] | None = None, nvml: Any = None) -> dict[str, GpuIdle]:
    """``{"gpu:K": {"uuid", "power_w", "temperature_c"}}`` for the visible GPUs (job order),
    or only ``job_indices``; empty when NVML cannot be read (the run goes on without)."""
    from wattlab.meters.nvml import open_session, visible_gpus

    try:
        session = open_session(nvml)
    except Exception:
        return {}
    out: dict[str, GpuIdle] = {}
    try:
        try:
            gpus = visible_gpus(nvml)
        except Exception:
            return {}
        for gpu in gpus:
            if job_indices is not None and gpu.job_index not in job_indices:
                continue
            device = gpu.device
            temperature = getattr(device, "temperature_c", None)
            out[f"gpu:{gpu.job_index}"] = {
                "uuid": gpu.uuid,
                "power_w": _read(device.average_power_w),
                "temperature_c": _read(temperature) if callable(temperature) else None,
            }
    finally:
        session.close()
    return out


class HostLoad(TypedDict):
    """The machine's 1-minute load average and its logical CPUs, read before a run."""

    load_1min: float
    cpus: int


def read_host_load() -> HostLoad | None:
    """The 1-minute load average (runnable processes, this sweep's own previous run included)
    and the logical CPUs, now; None where the system gives no load average."""
    import os

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return {"load_1min": float(load), "cpus": os.cpu_count() or 1}


def read_before_run(job_indices: list[int] | None = None, nvml: Any = None) -> dict[str, Any]:
    """What a sweep records just before a run: each GPU's reading (``read_gpu_idle``) and the
    host's load under ``"host"`` (when the system gives one); empty when neither is readable."""
    out: dict[str, Any] = dict(read_gpu_idle(job_indices, nvml))
    host = read_host_load()
    if host is not None:
        out["host"] = host
    return out


def hottest_gpu_c(job_indices: list[int] | None = None, nvml: Any = None) -> float | None:
    """The highest GPU temperature now (degrees C), None when none can be read."""
    temps = [
        v["temperature_c"]
        for v in read_gpu_idle(job_indices, nvml).values()
        if v["temperature_c"] is not None
    ]
    return max(temps) if temps else None


def _read(fn: Callable[[], float | None]) -> float | None:
    try:
        value = fn()
    except Exception:
        return None
    return None if value is None else float(value)
