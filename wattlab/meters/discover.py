"""Find every meter this process should use, and say plainly what is missing and why.

GPUs: every GPU visible to this job (CUDA_VISIBLE_DEVICES) through NVML. Host: RAPL package
zones for the CPU and dram zones for memory; where no package zone is readable the CPU is
estimated (TDP model), and where no dram zone is readable memory is estimated (W per GiB). psys
zones are listed but marked ``details["in_total"] = False``: psys covers package + dram, so
adding it would count them twice. Every other meter has ``details["in_total"] = True``.

Only ranks with ``include_host=True`` (local rank 0 in DDP) meter the CPU and memory, so each
host is counted once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wattlab.errors import ConfigError
from wattlab.meters.base import Discovery, Meter, MeterProblem
from wattlab.meters.modelled import CPU_LOADS, RAM_MEASURES, CpuEstimateMeter, RamEstimateMeter
from wattlab.meters.nvml import (
    NvmlError,
    NvmlGpuMeter,
    nvml_problem,
    open_session,
    select_visible_gpus,
)
from wattlab.meters.rapl import CPU_FALLBACK, RAM_FALLBACK, ReadText, open_rapl


def _discover_gpus(
    pynvml_module: Any,
    force_sampled: bool,
    env: Mapping[str, str],
    clock: Callable[[], float],
    gpu_indices: Sequence[int] | None = None,
) -> tuple[list[Meter], list[MeterProblem]]:
    meters: list[Meter] = []
    problems: list[MeterProblem] = []
    try:
        session = open_session(pynvml_module)
    except (ImportError, NvmlError) as exc:
        return [], [nvml_problem(exc)]
    try:
        try:
            gpus, selection = select_visible_gpus(pynvml_module, env)  # MIG: MeterError
        except NvmlError as exc:
            return [], [nvml_problem(exc)]
        if selection.ignored:
            problems.append(
                MeterProblem(
                    "gpu",
                    f"CUDA_VISIBLE_DEVICES={selection.raw!r}: the entry "
                    f"{selection.ignored[0]!r} names no GPU NVML sees (or repeats one), so "
                    "CUDA ignores it and every entry after it.",
                    "List only GPUs that exist, by index or GPU-<uuid> (see `nvidia-smi -L`).",
                    f"metering the {len(gpus)} GPU(s) listed before it",
                )
            )
        if gpu_indices is not None:
            wanted = set(gpu_indices)
            missing = sorted(wanted - {g.job_index for g in gpus})
            if missing:
                problems.append(
                    MeterProblem(
                        f"gpu:{missing[0]}",
                        f"GPU index {missing[0]} is not among the {len(gpus)} visible GPU(s).",
                        "Check CUDA_VISIBLE_DEVICES and the number of processes per node.",
                        "none: that GPU is not metered",
                    )
                )
            gpus = [g for g in gpus if g.job_index in wanted]
        if not gpus and gpu_indices is None:
            if selection.raw is not None:
                reason = f"CUDA_VISIBLE_DEVICES={selection.raw!r} hides every GPU."
                fix = "Unset CUDA_VISIBLE_DEVICES or list the GPUs to use."
            else:
                reason = "NVML sees no NVIDIA GPU on this machine."
                fix = "Check `nvidia-smi -L`; run on a machine with an NVIDIA GPU."
            problems.append(MeterProblem("gpu", reason, fix, "none: GPU energy is not metered"))
        for gpu in gpus:
            component = f"gpu:{gpu.job_index}"
            try:
                meter = NvmlGpuMeter(pynvml_module, gpu.job_index, gpu, force_sampled, clock=clock)
            except NvmlError as exc:
                problems.append(nvml_problem(exc, component))
                continue
            meter.info.details["in_total"] = True
            meters.append(meter)
            if meter.sampled and not force_sampled:
                problems.append(
                    MeterProblem(
                        component,
                        f"{gpu.name} ({gpu.uuid}) does not support NVML's total-energy counter "
                        "(it needs a Volta or newer data-centre GPU).",
                        "Use a GPU with the counter for measured energy; nothing to fix here.",
                        "NVML power readings integrated at every poll (provenance sampled)",
                    )
                )
    finally:
        session.close()
    return meters, problems


def _discover_host(
    powercap_root: str | os.PathLike[str] | None,
    cpu_tdp_w: float | None,
    env: Mapping[str, str],
    read_text: ReadText | None,
    cpuinfo_text: str | None,
    utilisation_fn: Callable[[], float] | None,
    used_bytes_fn: Callable[[], float] | None,
    clock: Callable[[], float],
    ram: tuple[str, int | None] = ("system", None),
    cpu: tuple[str, int | None] = ("machine", None),
) -> tuple[list[Meter], list[MeterProblem]]:
    scan = open_rapl(powercap_root, read_text=read_text, clock=clock, env=env)
    problems = list(scan.problems)
    meters: list[Meter] = []
    package_zones = [
        z for z in scan.zones if z.control_type == "intel-rapl" and z.role == "package"
    ]
    packages = scan.packages()

    # All or nothing per kind: mixing a counter for one socket with a machine-wide estimate
    # would count that socket twice.
    if packages and len(packages) == len(package_zones):
        meters.extend(packages)
    else:
        for package in packages:
            package.close()
        if packages:
            problems.append(
                MeterProblem(
                    "rapl:package",
                    f"only {len(packages)} of {len(package_zones)} RAPL package zones are "
                    "readable, and a partial sum would miss sockets.",
                    "Make every package zone's energy_uj readable (see the problems above).",
                    CPU_FALLBACK,
                )
            )
        cpu_load, cpu_pid = cpu
        meters.append(
            CpuEstimateMeter.from_machine(
                cpu_tdp_w,
                utilisation_fn,
                cpuinfo_text=cpuinfo_text,
                clock=clock,
                load=cpu_load,
                pid=cpu_pid,
            )
        )

    drams = scan.drams()
    names_with_dram = {m.zone.parent_name for m in drams}
    if packages and len(packages) == len(package_zones) and drams:
        complete = all(m.zone.name in names_with_dram for m in packages)
    else:
        complete = False
    if complete:
        meters.extend(drams)
    else:
        for dram in drams:
            dram.close()
        dram_zones = [z for z in scan.zones if z.control_type == "intel-rapl" and z.role == "dram"]
        if scan.zones and not dram_zones:
            problems.append(
                MeterProblem(
                    "rapl:dram",
                    "this CPU exposes no RAPL dram zone (common on desktop Intel and on AMD "
                    "CPUs), so memory energy is not measured.",
                    "Nothing to fix on this machine; server Intel CPUs report DRAM energy.",
                    RAM_FALLBACK,
                )
            )
        elif drams:
            problems.append(
                MeterProblem(
                    "rapl:dram",
                    "RAPL dram zones are readable for only some of the packages that are "
                    "metered, and a partial sum would miss memory.",
                    "Make every dram zone's energy_uj readable, and the package zones too.",
                    RAM_FALLBACK,
                )
            )
        measure, pid = ram
        meters.append(
            RamEstimateMeter(measure=measure, pid=pid, used_bytes_fn=used_bytes_fn, clock=clock)
        )

    for meter in meters:
        meter.info.details["in_total"] = True
    for meter in scan.psys():
        meter.info.details["in_total"] = False
        meter.info.details["not_in_total_because"] = (
            "psys covers package and dram, which are summed instead"
        )
        meters.append(meter)
    return meters, problems


def discover_meters(
    *,
    pynvml_module: Any = None,
    powercap_root: str | os.PathLike[str] | None = None,
    cpu_tdp_w: float | None = None,
    include_gpus: bool = True,
    gpu_indices: Sequence[int] | None = None,
    include_host: bool = True,
    force_sampled_gpu: bool = False,
    env: Mapping[str, str] | None = None,
    rapl_read_text: ReadText | None = None,
    cpuinfo_text: str | None = None,
    utilisation_fn: Callable[[], float] | None = None,
    used_bytes_fn: Callable[[], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
    ram_measure: str = "system",
    ram_pid: int | None = None,
    cpu_load: str = "machine",
    cpu_pid: int | None = None,
) -> Discovery:
    """Open every meter this process should use; problems say what is missing, why, the fix
    and the fallback.

    ``pynvml_module``: the pynvml module, a fake of it, or an NVML backend with
    ``open_session()`` (see ``wattlab.meters.nvml``); default: import nvidia-ml-py.
    ``powercap_root``: RAPL sysfs root (default $WATTLAB_POWERCAP_ROOT or /sys/class/powercap).
    ``cpu_tdp_w``: CPU TDP for the estimate when RAPL is unreadable (W; the CLI's --cpu-tdp).
    ``gpu_indices``: only these job GPU indices (a DDP rank meters its own GPU); None = all.
    ``include_host``: meter CPU and memory (False on DDP ranks other than local rank 0).
    ``env``: environment for CUDA_VISIBLE_DEVICES and WATTLAB_POWERCAP_ROOT (default os.environ).
    ``ram_measure``: the memory the RAM estimate counts when no RAPL dram zone is readable:
    "system" (the whole system's used memory) or "process" (the resident memory of process
    ``ram_pid``, default this one, and its children, as the reference paper's replication).
    ``cpu_load``: the load the CPU estimate counts when RAPL is unreadable: "machine" (the whole
    machine's busy fraction: every process's load counts as the run's) or "process" (the CPU
    time of process ``cpu_pid``, default this one, and its descendants, exited ones included).
    The remaining keywords are seams for tests. Raises MeterError for MIG.
    """
    env = os.environ if env is None else env
    if ram_measure not in RAM_MEASURES:
        raise ConfigError(
            f"the RAM measure must be one of {', '.join(RAM_MEASURES)}, got {ram_measure!r}."
        )
    if cpu_load not in CPU_LOADS:
        raise ConfigError(f"--cpu-load must be one of {', '.join(CPU_LOADS)}, got {cpu_load!r}.")
    meters: list[Meter] = []
    problems: list[MeterProblem] = []
    try:
        if include_gpus:
            gpu_meters, gpu_problems = _discover_gpus(
                pynvml_module, force_sampled_gpu, env, clock, gpu_indices
            )
            meters += gpu_meters
            problems += gpu_problems
        if include_host:
            host_meters, host_problems = _discover_host(
                powercap_root,
                cpu_tdp_w,
                env,
                rapl_read_text,
                cpuinfo_text,
                utilisation_fn,
                used_bytes_fn,
                clock,
                (ram_measure, ram_pid),
                (cpu_load, cpu_pid),
            )
            meters += host_meters
            problems += host_problems
    except BaseException:
        for meter in meters:
            meter.close()
        raise
    return Discovery(meters=meters, problems=problems)


def describe_discovery(discovery: Discovery) -> list[dict[str, object]]:
    """Rows for `wattlab devices`: one per meter, then one per problem. Every row has the same
    keys: status ("ok" | "missing"), component, source, provenance, in_total, description,
    reason, fix, fallback."""
    rows: list[dict[str, object]] = []
    for meter in discovery.meters:
        info = meter.info
        rows.append(
            {
                "status": "ok",
                "component": info.component,
                "source": info.source,
                "provenance": info.provenance.value,
                "in_total": bool(info.details.get("in_total", True)),
                "description": info.description,
                "reason": "",
                "fix": "",
                "fallback": "",
            }
        )
    for problem in discovery.problems:
        rows.append(
            {
                "status": "missing",
                "component": problem.component,
                "source": "",
                "provenance": "",
                "in_total": False,
                "description": "",
                "reason": problem.reason,
                "fix": problem.fix,
                "fallback": problem.fallback,
            }
        )
    return rows
