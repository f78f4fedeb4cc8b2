"""What an estimate assumed, said where the estimate is: the CPU model's name, where its TDP came
from (a per-thread fallback is an assumption, and says so), whose load the utilisation counted
(the whole machine's, on a shared host every process's; or the measured process tree's), and
which memory the RAM model counted at what rate. Read from each run's ``components_json``, where
the worker keeps the estimating meters' assumptions (``experiment.db.record.ASSUMPTION_KEYS``);
runs stored before that say their TDP's origin was not recorded rather than guess it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from wattlab.experiment.db.stored_run import StoredRun
from wattlab.meters.modelled import (
    CPU_RELATIVE_UNCERTAINTY,
    PER_THREAD_FALLBACK_W,
    RAM_RELATIVE_UNCERTAINTY,
    RAM_W_PER_GIB,
)
from wattlab.wording import KIND_NAMES, and_join, component_kind

FALLBACK = "per-thread fallback"
MEMORY_WORDS = {"system": "the system's used memory", "process": "the training's memory"}


def _estimated_components(runs: Iterable[StoredRun]) -> list[tuple[str, dict[str, Any], StoredRun]]:
    out = []
    for run in runs:
        for name, info in (run.components_json or {}).items():
            if not isinstance(info, dict) or info.get("provenance") != "estimated":
                continue
            if info.get("in_total") is False:
                continue
            out.append((component_kind(name), info, run))
    return out


def _watts(values: Iterable[float]) -> str:
    found = sorted({round(v, 3) for v in values if math.isfinite(v)})
    return "/".join(f"{v:g}" for v in found) + " W"


def _tdp_words(infos: list[dict[str, Any]]) -> str:
    """Where the CPU estimate's TDP came from, for every source the runs used."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for info in infos:
        by_source.setdefault(str(info.get("tdp_source") or "not recorded"), []).append(info)
    pieces = []
    for source, mine in by_source.items():
        tdps = [float(i["tdp_w"]) for i in mine if isinstance(i.get("tdp_w"), int | float)]
        watts = _watts(tdps) if tdps else ""
        if source == FALLBACK:
            threads = sorted({int(i["logical_cpus"]) for i in mine if i.get("logical_cpus")})
            count = f" x {'/'.join(map(str, threads))} logical CPUs" if threads else ""
            pieces.append(
                f"an assumed TDP of {watts} ({PER_THREAD_FALLBACK_W:g} W per logical "
                f"CPU{count}: wattlab's table does not know this CPU, so the TDP is a fallback, "
                "not the CPU's own)"
            )
        elif source == "table":
            pieces.append(f"its TDP from wattlab's table of CPU models ({watts})")
        elif source == "user":
            pieces.append(f"the TDP given with --cpu-tdp ({watts})")
        else:
            pieces.append("a TDP whose origin the runs did not record")
    return and_join(pieces)


_LOAD_SCOPES = {
    "machine-wide": (
        "the whole machine's CPU utilisation (on a shared host, other processes' load counts as "
        "the training's)"
    ),
    "process-tree": (
        "the CPU time of the measured process tree (other processes' load is not counted, nor "
        "work the kernel does for it outside its processes; the idle power is shared by the "
        "machine's users)"
    ),
}


def _load_words(infos: list[dict[str, Any]]) -> str:
    loads = {str(i.get("utilisation") or "") for i in infos}
    if len(loads) == 1 and next(iter(loads)) in _LOAD_SCOPES:
        return _LOAD_SCOPES[next(iter(loads))]
    scopes = sorted(loads & set(_LOAD_SCOPES))
    known = [f"{_LOAD_SCOPES[load].split(' (')[0]} for some runs" for load in scopes]
    if known:
        return and_join(known)
    return "a CPU utilisation whose scope the runs did not record"


def _cpu_names(infos: list[dict[str, Any]], runs: list[StoredRun]) -> str:
    names = [str(i["cpu_model"]) for i in infos if i.get("cpu_model")]
    names += [str(r.cpu_model) for r in runs if r.cpu_model]
    unique = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    return ", ".join(unique) if unique else "model not recorded"


def estimation_methods(runs: Iterable[StoredRun]) -> list[str]:
    """How the estimated part was modelled, per kind, with what each model assumed: "the CPU
    (Intel(R) Xeon(R) Processor) from an assumed TDP of 7 W (3.5 W per logical CPU x 2 logical
    CPUs: ...) and the whole machine's CPU utilisation (...) (±40 %)"."""
    runs = list(runs)
    found = _estimated_components(runs)
    kinds: dict[str, list[tuple[dict[str, Any], StoredRun]]] = {}
    for kind, info, run in found:
        kinds.setdefault(kind, []).append((info, run))
    out = []
    if "cpu" in kinds:
        infos = [i for i, _ in kinds["cpu"]]
        cpu_runs = list({id(r): r for _, r in kinds["cpu"]}.values())
        out.append(
            f"the CPU ({_cpu_names(infos, cpu_runs)}) from {_tdp_words(infos)} and "
            f"{_load_words(infos)} (±{CPU_RELATIVE_UNCERTAINTY * 100:.0f} %)"
        )
    if "ram" in kinds:
        used = sorted(
            {MEMORY_WORDS.get(str(i.get("ram_measure")), "memory in use") for i, _ in kinds["ram"]}
        )
        out.append(
            f"the RAM at {RAM_W_PER_GIB:g} W per GiB of {and_join(used)} (Green Algorithms' "
            f"figure, ±{RAM_RELATIVE_UNCERTAINTY * 100:.0f} %)"
        )
    for kind in sorted(set(kinds) - {"cpu", "ram", "total"}):
        out.append(f"the {KIND_NAMES[kind]} from a model")
    if any(not (r.components_json or {}) and r.provenance == "estimated" for r in runs):
        out.append("whole-run totals from a model")
    return out


def assumptions_sentence(runs: Iterable[StoredRun]) -> str | None:
    """One sentence for a report: "The estimated part assumed: ..."; None when nothing was
    estimated."""
    methods = estimation_methods(runs)
    if not methods:
        return None
    return f"wattlab estimated {and_join(methods)}."
