"""Combine the probe's H200 judgement calls (bench/probe_evaluate.py outputs) into one table.

    python bench/probe_summary.py docs/measured/h200-probe-2026-12-05{b,c,d}/probe-evaluate.json

Per pair: candidates measured, the fewest windows of one, the probe's seconds (set-up included)
and its set-up alone, the largest |energy per image - truth| / truth of its measured rows, the
truth's own spread (the largest max/min - 1 of one precision's truth windows), the probe's cost
as a share of a 30-epoch CIFAR training and of a 10-minute one, and the probe's and PRE's
regrets. Then every pair's scores together, and the cases where the probe's pick was worse than
PRE's from the same start and limit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def pairs(paths: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        for key, pair in json.loads(Path(path).read_text())["pairs"].items():
            if "error" not in pair:
                out[key] = pair  # a later call's pair replaces an earlier one
    return out


def worse_cases(pair: dict[str, Any]) -> list[tuple[str, str, float, float]]:
    """(start, limit, probe regret, PRE regret) where the probe's pick regrets more."""
    out = []
    for probe, pre in zip(pair["scores"]["probe"], pair["scores"]["pre"], strict=True):
        if probe["regret"] > pre["regret"] + 1e-12:
            out.append(
                (probe["start"]["precision"], probe["limit"], probe["regret"], pre["regret"])
            )
    return out


def main(paths: list[str]) -> None:
    from wattlab.estimate.advise.evaluation import summarise

    found = pairs(paths)
    print(
        "| pair | measured | windows (fewest) | probe s | set-up s | max energy error | "
        "truth spread | cost: 30 epochs | cost: 10 min | probe regret med / p90 | "
        "PRE regret med / p90 |"
    )
    print("|" + " --- |" * 11)
    rows_total = rows_within = 0
    for key, pair in found.items():
        c = pair["checks"]
        errors = [abs(v) for v in c["energy_error"].values()]
        rows_total += len(errors)
        rows_within += sum(e <= 0.05 for e in errors)
        spread = max(v["spread"] for v in pair["truth"]["median"].values())
        share = c["cost_share"]
        print(
            f"| {key} | {c['measured']} of 4 | {min(c['windows'].values())} | {c['probe_s']:.1f} | "
            f"{c['setup_s']:.1f} | {max(errors):.1%} | {spread:.1%} | "
            f"{share['of_30_epochs']:.1%} | {share['of_10_minutes']:.1%} | "
            f"{pair['probe']['median_regret']:.1%} / {pair['probe']['p90_regret']:.1%} | "
            f"{pair['pre']['median_regret']:.1%} / {pair['pre']['p90_regret']:.1%} |"
        )
    print()
    for who in ("probe", "pre"):
        s = summarise([x for p in found.values() for x in p["scores"][who]])
        print(
            f"all, {who}: n {s['n']}, median regret {s['median_regret']:.1%}, p90 "
            f"{s['p90_regret']:.1%}, violations {s['violation_rate']:.1%}"
        )
    print(f"measured rows within 5 % of the truth: {rows_within} of {rows_total}")
    for key, pair in found.items():
        for start, limit, probe, pre in worse_cases(pair):
            print(
                f"probe worse than PRE: {key} from {start}, limit {limit}: {probe:.1%} vs {pre:.1%}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
