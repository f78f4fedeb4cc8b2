"""Read-only GPU readings before a run: each GPU's power draw and temperature, right now.

A sweep records them before every run (the reference study's habit), so a run that started on
a hot or busy GPU can be recognised. Nothing here changes a GPU setting.
"""

from __future__ import annotations

from typing import Any

NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t: the GPU die


def read_gpu_idle(job_indices: list[int] | None = None, pynvml: Any = None) -> dict[str, Any]:
    """``{"gpu:K": {"uuid", "power_w", "temperature_c"}}`` for the visible GPUs (job order),
    or only ``job_indices``; empty when NVML cannot be read (the run goes on without)."""
    from wattlab.meters.nvml import NvmlSession, visible_gpus

    try:
        session = NvmlSession(pynvml)
    except Exception:
        return {}
    out: dict[str, Any] = {}
    try:
        pm = session.pynvml
        try:
            gpus = visible_gpus(pm)
        except Exception:
            return {}
        for gpu in gpus:
            if job_indices is not None and gpu.job_index not in job_indices:
                continue
            out[f"gpu:{gpu.job_index}"] = {
                "uuid": gpu.uuid,
                "power_w": _read(lambda h=gpu.handle: pm.nvmlDeviceGetPowerUsage(h) / 1000.0),
                "temperature_c": _read(
                    lambda h=gpu.handle: pm.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)
                ),
            }
    finally:
        session.close()
    return out


def hottest_gpu_c(job_indices: list[int] | None = None, pynvml: Any = None) -> float | None:
    """The highest GPU temperature now (degrees C), None when none can be read."""
    temps = [
        v["temperature_c"]
        for v in read_gpu_idle(job_indices, pynvml).values()
        if v.get("temperature_c") is not None
    ]
    return max(temps) if temps else None


def _read(fn: Any) -> float | None:
    try:
        return float(fn())
    except Exception:
        return None
