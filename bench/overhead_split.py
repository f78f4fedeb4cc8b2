"""Per-run sweep overhead split by what a run pays: the first run of a configuration (cuDNN
autotuning at a new precision and batch size; the sweep's very first run also starts CUDA)
against its repeats, as mean and median, from ``bench/sweep_overhead.py``'s JSON.

    python bench/overhead_split.py docs/measured/h200-sweep-overhead-2026-12-03.json \
        --json docs/measured/h200-sweep-overhead-2026-12-03-split.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def split(sweep: dict[str, Any]) -> dict[str, Any]:
    """Overheads (s) of one sweep's runs: all, first of their configuration, repeats."""
    seen: set[str] = set()
    first: list[float] = []
    repeats: list[float] = []
    for run in sorted(sweep["runs"], key=lambda r: r["position"]):
        (repeats if run["config_hash"] in seen else first).append(float(run["overhead_s"]))
        seen.add(run["config_hash"])
    every = first + repeats

    def stats(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"runs": 0}
        return {
            "runs": len(values),
            "mean_s": statistics.fmean(values),
            "median_s": statistics.median(values),
            "min_s": min(values),
            "max_s": max(values),
        }

    return {
        "engine": sweep.get("engine"),
        "all": stats(every),
        "first_of_configuration": stats(first),
        "repeats": stats(repeats),
        "overheads_s": every,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", help="bench/sweep_overhead.py's --json output")
    parser.add_argument("--json", help="write the split here")
    args = parser.parse_args(argv)
    data = json.loads(Path(args.bench_json).read_text())
    out = {"source": args.bench_json, "sweeps": [split(s) for s in data["sweeps"]]}
    for s in out["sweeps"]:
        for part in ("all", "first_of_configuration", "repeats"):
            p = s[part]
            if p["runs"]:
                print(
                    f"{s['engine']} {part}: {p['runs']} runs, mean {p['mean_s']:.2f} s, median "
                    f"{p['median_s']:.2f} s, {p['min_s']:.2f}-{p['max_s']:.2f} s"
                )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
