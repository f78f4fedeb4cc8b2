"""How long one ``wattlab estimate`` call takes, against a bare ``import torch, torchvision``.

Each timing is a fresh process, as a user runs it: the bare import, ``wattlab estimate`` with
an empty PRE cache (it fits PRE on the reference runs and keeps the fit) and with a warm cache
(it loads the fit). Prints the medians and the ratio warm / bare (issue 21's target: <= 3) and
writes them as JSON (``$OUT`` or ``bench-out``). Runs on a CPU; the cache lives in temporary
folders, never in the user's.

    python bench/estimate_speed.py
    python bench/estimate_speed.py --repeats 5 --cold-repeats 1 --model resnet50
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402

TARGET_RATIO = 3.0


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of one process; a failure stops the bench with its
    output. On a shared machine the CPU time is the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3, help="Bare and warm runs (median).")
    parser.add_argument("--cold-repeats", type=int, default=3, help="Cold-cache runs (median).")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--data", default=None, help="Reference CSV (default: the shipped one).")
    args = parser.parse_args()

    repo = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    bare = [sys.executable, "-c", "import torch, torchvision"]
    estimate = [sys.executable, "-m", "wattlab.cli", "estimate", "--model", args.model,
                "--epochs", "1", "--gpu-name", "NVIDIA H200"]  # fmt: skip
    if args.data:
        estimate += ["--data", args.data]

    timed(bare, env)  # warm the file cache: every timing below reads the same files
    names = ("bare import", "estimate, cold cache", "estimate, warm cache")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="wattlab-bench-cache-") as root:
        for i in range(args.cold_repeats):
            cold_env = {**env, "WATTLAB_CACHE_DIR": str(Path(root) / f"cold-{i}")}
            times["estimate, cold cache"].append(timed(estimate, cold_env))
        warm_env = {**env, "WATTLAB_CACHE_DIR": str(Path(root) / "warm")}
        timed(estimate, warm_env)  # fills the cache
        for _ in range(args.repeats):  # interleaved, so that load drifts hit both alike
            times["bare import"].append(timed(bare, env))
            times["estimate, warm cache"].append(timed(estimate, warm_env))

    medians = {name: statistics.median(w for w, _ in values) for name, values in times.items()}
    cpu = {name: statistics.median(c for _, c in values) for name, values in times.items()}
    bare_s, bare_cpu_s = medians["bare import"], cpu["bare import"]
    rows = [
        [name, len(times[name]), f"{medians[name]:.2f}", f"{medians[name] / bare_s:.2f}",
         f"{cpu[name]:.2f}", f"{cpu[name] / bare_cpu_s:.2f}",
         " ".join(f"{w:.1f}" for w, _ in times[name])]
        for name in times
    ]  # fmt: skip
    print_table(
        f"wattlab estimate --model {args.model} against `python -c 'import torch, torchvision'` "
        f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})",
        ["what", "runs", "wall s", "x bare", "CPU s", "x bare (CPU)", "each wall s"],
        rows,
    )
    ratio = medians["estimate, warm cache"] / bare_s
    cpu_ratio = cpu["estimate, warm cache"] / bare_cpu_s
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(
        f"\nwarm-cache estimate / bare import = {ratio:.2f} wall, {cpu_ratio:.2f} CPU "
        f"({verdict} the target <= 3 on wall time)"
    )
    out = write_json(
        "estimate_speed",
        {
            "model": args.model,
            "data": args.data or "shipped reference",
            "cpus": os.cpu_count(),
            "load_1min": os.getloadavg()[0],
            "times_wall_cpu_s": times,
            "median_wall_s": medians,
            "median_cpu_s": cpu,
            "warm_over_bare": ratio,
            "warm_over_bare_cpu": cpu_ratio,
            "cold_over_bare": medians["estimate, cold cache"] / bare_s,
            "target_ratio": TARGET_RATIO,
        },
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
