"""Does `wattlab compare` cry wolf when the machine drifts? Real command sweeps on the CPU, with
busy loops turned on partway through (issue 49).

Each trial runs a real command sweep (the one sweep driver, `wattlab sweep`'s engine) of a tiny
deterministic CPU workload, a Python loop of N iterations that reports 1 000 samples through
`wattlab.budget`, and judges it with exactly what `wattlab compare` runs:

- **interleaved A/A**: one sweep, grid `side: [a, b]` with the same N on both sides, run in the
  order `abba` (A B, B A, ...), compared with `--sides side=a,b` (the paired analysis). Halfway
  through the sweep, `--busy` busy-loop processes start (a machine that gets busier).
- **interleaved A/B**: the same, with side b doing `1 + --change` times the work (10 %).
- **sequential A/A**: two sweeps of the same N one after the other, compared as two sides
  (`compare A.db::a B.db::b`); the busy loops start halfway through the second (the candidate).
  Judged as `compare` now judges sides run one after the other (the between-session term), and
  with no session term (as `compare` judged two sweeps on a machine without a GPU within an
  hour before issue 49).

On a machine without RAPL (as here) the energy is modelled from a CPU load (TDP x load): what
the gate judges is then that model, and `compare` says so. ``--cpu-load process`` (the default,
as the CPU-only CI recipe in docs/compare.md) counts the CPU time of the sweep's own process tree
(this bench, the guard and the workload); ``--cpu-load machine`` counts the whole machine's
load, other users' and the busy loops' included (the model's default). The busy loops start
outside the bench's process tree (a launcher starts each one and exits), as another tenant's
work would, and each ends itself when the bench is gone. Other processes (other users of the
machine) run beside the trials; the output says how loaded the machine was before.

    PYTHONPATH=$PWD OUT=/tmp/out python bench/compare_drift.py --aa 40 --ab 20 --seq 10

prints a table and writes `compare-drift.json` under $OUT (or bench-out/).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import print_table, write_json  # noqa: E402
from wattlab.analysis.compare_runs import (  # noqa: E402
    Comparison,
    SideSpec,
    SidesSpec,
    compare_sides,
    load_side,
    split_sweep,
)

SAMPLES = 1000
# one run of the workload: N iterations of a Python loop, its budget marked with 1 000 samples
# (it prints the CPU seconds its loop took, read back as a diagnostic: the work's own noise)
WORK = (
    "import sys, time, wattlab\n"
    "n = int(sys.argv[1].split('-')[1])\n"
    f"with wattlab.budget(samples={SAMPLES}):\n"
    "    start = time.process_time()\n"
    "    x = 0\n"
    "    for i in range(n):\n"
    "        x += i * i\n"
    "    print(time.process_time() - start)\n"
)
# a busy loop that ends itself once the process that asked for it (argv[1]) is gone
BUSY = (
    "import os, sys\n"
    "owner = int(sys.argv[1])\n"
    "while True:\n"
    "    for _ in range(200_000):\n"
    "        pass\n"
    "    try:\n"
    "        os.kill(owner, 0)\n"
    "    except ProcessLookupError:\n"
    "        break\n"
)
# starts BUSY and exits at once, printing its pid: the loop is no child of the bench's tree
LAUNCH = (
    "import subprocess, sys\n"
    "busy = subprocess.Popen(\n"
    "    [sys.executable, '-c', sys.argv[1], sys.argv[2]],\n"
    "    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
    ")\n"
    "print(busy.pid, flush=True)\n"
)


class BusyLoops:
    """``count`` busy-loop processes outside this process's tree (another tenant's load),
    started on demand, always ended (by their own pids and start times)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[Any] = []  # psutil.Process of each loop

    def start(self) -> None:
        import psutil

        if self.procs:
            return
        for _ in range(self.count):
            launched = subprocess.run(
                [sys.executable, "-c", LAUNCH, BUSY, str(os.getpid())],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
            self.procs.append(psutil.Process(int(launched.stdout.strip())))

    def stop(self) -> None:
        import psutil

        for proc in self.procs:
            try:
                proc.kill()  # psutil checks the pid is still this process
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(self.procs, timeout=10)
        self.procs = []

    def __enter__(self) -> BusyLoops:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


CPU_LOAD = {"load": "process"}  # --cpu-load: what the CPU model's utilisation counts


def sweep(
    db: Path, name: str, sides: dict[str, int], reps: int, on_start: Callable[[int], None]
) -> None:
    """Run one command sweep of the workload with the sweep engine (order abba over the
    ``sides``: value -> iterations); ``on_start(k)`` before its k-th run (0-based)."""
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.specs.command import CommandSweepSpec
    from wattlab.experiment.sweep.command_plan import CommandOptions, run_command_plan
    from wattlab.experiment.sweep.plan import make_plan

    spec = CommandSweepSpec.from_dict(
        {
            "name": name,
            "label": "busy-work",
            "command": [sys.executable, "-c", WORK, "{side}"],
            "env": {"PYTHONPATH": str(ROOT)},
            "grid": {"side": [f"{side}-{n}" for side, n in sides.items()]},
            "repetitions": reps,
            "order": "abba",
            "warmup_runs": 0,
            "cooldown_s": 0,
        }
    )
    with open_store(db) as store:
        plan = make_plan(spec, store)
    started = iter(range(len(plan.entries)))
    outcomes = run_command_plan(
        plan,
        CommandOptions(db_path=str(db), cpu_load=CPU_LOAD["load"]),
        on_start=lambda _: on_start(next(started)),
    )
    failed = [o for _, o in outcomes if o.status != "ok"]
    if failed:
        raise SystemExit(f"a run of the workload failed: {failed[0].error}")


def interleaved(folder: Path, n: int, change: float, reps: int, busy: int, seed: int) -> Comparison:
    """One interleaved trial: A and B in one abba sweep, busy loops from its middle on."""
    db = folder / f"i{seed}.db"
    runs = 2 * reps
    a, b = n, round(n * (1 + change))
    with BusyLoops(busy) as loops:
        sweep(db, "ci", {"a": a, "b": b}, reps, lambda k: loops.start() if k == runs // 2 else None)
    base, cand = split_sweep(SideSpec(str(db), "ci"), SidesSpec("side", f"a-{a}", f"b-{b}"))
    return compare_sides(base, cand)


def sequential(
    folder: Path, n: int, reps: int, busy: int, seed: int
) -> tuple[Comparison, Comparison]:
    """One sequential A/A trial: two sweeps one after the other, busy loops from the middle of
    the second (the candidate); judged as `compare` now does (two sessions: the session term)
    and with no session term (as `compare` did for runs without a GPU within an hour)."""
    db_a, db_b = folder / f"a{seed}.db", folder / f"b{seed}.db"
    sweep(db_a, "a", {"a": n}, reps, lambda k: None)
    with BusyLoops(busy) as loops:
        sweep(db_b, "b", {"a": n}, reps, lambda k: loops.start() if k == reps // 2 else None)
    base, cand = load_side(SideSpec(str(db_a), "a")), load_side(SideSpec(str(db_b), "b"))
    return compare_sides(base, cand), compare_sides(base, cand, session_sd=0.0)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson interval of a rate of k in n."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def loop_cpu_s(db: str, runs: Any) -> list[float]:
    """The CPU seconds each run's loop reported (its kept stdout), in the runs' order."""
    from wattlab.experiment.runs.command_record import output_paths

    out = []
    for run in runs:
        text = output_paths(db, int(run.id))[0].read_text().split()
        out.append(float(text[-1]) if text else math.nan)
    return out


def log_spread(values: list[float]) -> float:
    """The standard deviation of log values (about their relative spread)."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 2:
        return math.nan
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def trial_row(kind: str, i: int, c: Comparison, seconds: float) -> dict[str, Any]:
    e, t = c.configs[0].energy, c.configs[0].time
    base_cpu = loop_cpu_s(c.baseline.spec.path, c.baseline.runs)
    cand_cpu = loop_cpu_s(c.candidate.spec.path, c.candidate.runs)
    mean_log = [sum(math.log(v) for v in side) / len(side) for side in (base_cpu, cand_cpu)]
    from wattlab.analysis.compare_runs import estimated_share, host_load

    return {
        "scenario": kind,
        "trial": i,
        "gate_failed": c.exceeds,
        "verdict": e.verdict,
        "analysis": e.method,
        "timing": c.timing,
        "session_sd_log": c.session_sd,
        "change": e.change,
        "low": e.low - 1,
        "high": e.high - 1,
        "baseline_n": e.baseline_n,
        "spread_log": e.spread,  # the runs' spread of log energy per sample (paired: of pairs)
        "detectable": e.detectable,
        "time_change": t.change,  # wall time per sample: what the model's idle term follows
        "time_low": t.low - 1,
        "time_high": t.high - 1,
        "time_spread_log": t.spread,
        # the loop's own CPU seconds (what a process-tree load follows, less its overhead):
        # candidate / baseline (geometric means) and the spread within each side
        "loop_cpu_change": math.exp(mean_log[1] - mean_log[0]) - 1,
        "loop_cpu_spread_log": [log_spread(base_cpu), log_spread(cand_cpu)],
        "load_per_cpu_before": [host_load(c.baseline.runs), host_load(c.candidate.runs)],
        "estimated_share": [estimated_share(c.baseline.runs), estimated_share(c.candidate.runs)],
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aa", type=int, default=40, help="interleaved A/A trials")
    parser.add_argument("--ab", type=int, default=10, help="interleaved A/B trials")
    parser.add_argument("--seq", type=int, default=10, help="sequential A/A trials")
    parser.add_argument("--reps", type=int, default=6, help="repetitions per side")
    parser.add_argument("--work", type=int, default=1_500_000, help="loop iterations per run")
    parser.add_argument("--change", type=float, default=0.10, help="the A/B change of work")
    parser.add_argument("--busy", type=int, default=2, help="busy loops turned on halfway")
    parser.add_argument(
        "--cpu-load",
        choices=("process", "machine"),
        default="process",
        help="what the CPU model's utilisation counts (wattlab's --cpu-load)",
    )
    args = parser.parse_args(argv)
    CPU_LOAD["load"] = args.cpu_load

    load_before = os.getloadavg()
    print(
        f"compare_drift: {platform.node()}, {os.cpu_count()} logical CPUs, load average "
        f"before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f} (1/5/15 "
        f"min); other processes (other users) share the machine during the trials; "
        f"--cpu-load {args.cpu_load}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    plan = (
        [("interleaved A/A", i) for i in range(args.aa)]
        + [("interleaved A/B", i) for i in range(args.ab)]
        + [("sequential A/A", i) for i in range(args.seq)]
    )
    order = sorted(plan, key=lambda p: (p[1], p[0]))  # the scenarios alternate over time
    with tempfile.TemporaryDirectory(prefix="compare-drift-") as tmp:
        for k, (kind, i) in enumerate(order):
            t0 = time.monotonic()
            if kind == "sequential A/A":
                c, bare = sequential(Path(tmp), args.work, args.reps, args.busy, k)
                judged = [(kind, c), (f"{kind}, no session term", bare)]
            else:
                change = args.change if kind == "interleaved A/B" else 0.0
                c = interleaved(Path(tmp), args.work, change, args.reps, args.busy, k)
                judged = [(kind, c)]
            for name, comparison in judged:
                row = trial_row(name, i, comparison, time.monotonic() - t0)
                rows.append(row)
                print(
                    f"{k + 1}/{len(order)} {name} #{i}: {row['change'] * 100:+.1f} % "
                    f"[{row['low'] * 100:+.1f}, {row['high'] * 100:+.1f}] {row['verdict']}, "
                    f"{row['analysis']}, {row['timing']}, gate "
                    f"{'FAILED' if row['gate_failed'] else 'passed'} ({row['seconds']:.1f} s); "
                    f"time {row['time_change'] * 100:+.1f} %, the loop's CPU time "
                    f"{row['loop_cpu_change'] * 100:+.1f} %",
                    flush=True,
                )
    table = []
    summary = {}
    scenarios = (
        "interleaved A/A",
        "interleaved A/B",
        "sequential A/A",
        "sequential A/A, no session term",
    )
    for kind in scenarios:
        mine = [r for r in rows if r["scenario"] == kind]
        if not mine:
            continue
        failed = sum(r["gate_failed"] for r in mine)
        low, high = wilson(failed, len(mine))
        changes = sorted(r["change"] for r in mine)
        median = changes[len(changes) // 2]
        summary[kind] = {
            "trials": len(mine),
            "gate_failed": failed,
            "wilson95": [low, high],
            "median_change": median,
            "median_spread_log": sorted(r["spread_log"] for r in mine)[len(mine) // 2],
            "median_detectable": sorted(r["detectable"] for r in mine)[len(mine) // 2],
            "median_time_spread_log": sorted(r["time_spread_log"] for r in mine)[len(mine) // 2],
            "median_loop_cpu_change": sorted(r["loop_cpu_change"] for r in mine)[len(mine) // 2],
            "loop_cpu_change_range": [
                min(r["loop_cpu_change"] for r in mine),
                max(r["loop_cpu_change"] for r in mine),
            ],
            "change_range": [changes[0], changes[-1]],
        }
        table.append(
            [
                kind,
                len(mine),
                f"{failed} ({failed / len(mine) * 100:.1f} %)",
                f"{low * 100:.1f}-{high * 100:.1f} %",
                f"{median * 100:+.1f} %",
                f"{summary[kind]['median_spread_log'] * 100:.1f} %",
                f"{summary[kind]['median_time_spread_log'] * 100:.1f} %",
                mine[0]["analysis"],
            ]
        )
    print_table(
        f"the gate (threshold 5 %, {args.reps} repetitions a side, {args.busy} busy loops from "
        f"halfway, {args.work} iterations a run, --cpu-load {args.cpu_load}), "
        f"{time.monotonic() - began:.0f} s in all",
        [
            "scenario",
            "trials",
            "the gate failed",
            "95 % interval",
            "median change",
            "median energy spread",
            "median time spread",
            "analysis",
        ],
        table,
    )
    path = write_json(
        "compare-drift",
        {"args": vars(args), "load_before": load_before, "summary": summary, "trials": rows},
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
