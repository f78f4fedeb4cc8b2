"""Combine the probe's H200 judgement calls (bench/probe_evaluate.py outputs) into one table.

    python bench/probe_summary.py docs/measured/h200-probe-2026-12-05{b,c,d}/probe-evaluate.json
    python bench/probe_summary.py --rescore docs/measured/h200-probe-2026-12-05{b,c,d}/raw.tgz

``--rescore`` scores the same recorded windows again with today's ranking code (the probe's
``--json`` rows and PRE's rows, against the recorded truths): no new measurement.

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


def rescored(archives: list[str]) -> dict[str, dict[str, Any]]:
    """Each pair of a recorded probe and truth (raw.tgz of bench/probe_evaluate.py), scored
    again with today's code; truths measured by an earlier call are looked up in every archive."""
    import importlib.util
    import tarfile

    spec = importlib.util.spec_from_file_location(
        "probe_evaluate", Path(__file__).with_name("probe_evaluate.py")
    )
    assert spec is not None and spec.loader is not None
    judge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge)
    files: dict[str, dict[str, Any]] = {}
    for archive in archives:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                handle = tar.extractfile(member)
                if handle is not None and name.endswith(".json"):
                    files[name] = json.loads(handle.read())
    out: dict[str, dict[str, Any]] = {}
    for name, data in files.items():
        if not name.startswith("probe-") or ("truth-" + name[6:]) not in files:
            continue
        model, batch = name[6:-5].rsplit("-bs", 1)
        truth_raw = files["truth-" + name[6:]]
        truth = {
            p: (v["energy_per_image_j"], v["time_per_image_s"])
            for p, v in truth_raw["median"].items()
        }
        samples = float(data.get("samples") or 1.0)

        def per_image(rows: list[dict[str, Any]], n: float = samples) -> list[dict[str, Any]]:
            return [{**r, **{k: r[k] / n for k in judge._PER_RUN}} for r in rows]

        pre_rows = (data.get("probe") or {}).get("pre_rows") or []
        scores = judge.score(truth, per_image(data["rows"]), per_image(pre_rows), int(batch))
        out[f"{model} bs{batch}"] = {
            "truth": truth_raw,
            "checks": judge.checks(truth, data, samples),
            "scores": scores,
            "probe": judge.summary(scores["probe"]),
            "pre": judge.summary(scores["pre"]),
        }
    return out


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

    found = rescored(paths[1:]) if paths[:1] == ["--rescore"] else pairs(paths)
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
