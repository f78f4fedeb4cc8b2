"""Read-only GPU readings before a run: each GPU's power draw and temperature, right now.

A sweep records them before every run (the reference study's habit), so a run that started on
a hot or busy GPU can be recognised. Nothing here changes a GPU setting.
"""

from __future__ import annotations

from typing import Any


def read_gpu_idle(job_indices: list[int] | None = None, pynvml: Any = None) -> dict[str, Any]:
    """``{"gpu:K": {"uuid", "power_w", "temperature_c"}}`` for the visible GPUs (job order),
    or only ``job_indices``; empty when NVML cannot be read (the run goes on without).
    ``pynvml``: as everywhere in ``wattlab.meters.nvml`` (None = the real library)."""
    from wattlab.meters.nvml import open_session, visible_gpus

    try:
        session = open_session(pynvml)
    except Exception:
        return {}
    out: dict[str, Any] = {}
    try:
        try:
            gpus = visible_gpus(pynvml)
        except Exception:
            return {}
        for gpu in gpus:
            if job_indices is not None and gpu.job_index not in job_indices:
                continue
            out[f"gpu:{gpu.job_index}"] = {
                "uuid": gpu.uuid,
                "power_w": gpu.device.average_power_w(),
                "temperature_c": gpu.device.temperature_c(),
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
