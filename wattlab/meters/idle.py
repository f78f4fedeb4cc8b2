"""Read-only GPU readings before a run: each GPU's power draw and temperature, right now.

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
