"""The operating region: each configuration against its own uncapped twin, not the baseline.

The toy sweep of issue 13: against the one baseline (1 GPU fp32 300 W) the "region" would be
{bf16 250 W, bf16 300 W (no cap at all), fp32 250 W}; against each configuration's own
highest power limit it is {1 GPU fp32 250 W, 2 GPUs fp32 250 W}."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from wattlab.analysis import (
    operating_region,
    power_limit_effects,
    region_against_baseline,
    summarize,
    summary_to_json,
)
from wattlab.analysis.report import write_report
from wattlab.experiment.db.store import open_store

# (label, gpus, precision, limit W, time s, energy J); by hand, against the own 300 W twin:
# fp32 250 W:   960 / 1000 - 1 = -4.0 %  energy, 101 / 100 - 1 = +1.0 % time  -> in
# bf16 250 W:   590 /  600 - 1 = -1.7 %  energy                               -> out
# 2 GPUs 250 W: 1200 / 1280 - 1 = -6.25 % energy, 56 / 55 - 1 = +1.8 % time  -> in
TOY = (
    ("1xGPU fp32 300W", 1, "fp32", 300.0, 100.0, 1000.0),
    ("1xGPU fp32 250W", 1, "fp32", 250.0, 101.0, 960.0),
    ("1xGPU bf16 300W", 1, "amp-bf16", 300.0, 60.0, 600.0),
    ("1xGPU bf16 250W", 1, "amp-bf16", 250.0, 61.0, 590.0),
    ("2xGPU fp32 300W", 2, "fp32", 300.0, 55.0, 1280.0),
    ("2xGPU fp32 250W", 2, "fp32", 250.0, 56.0, 1200.0),
)


def toy_runs(reps: int = 2) -> pd.DataFrame:
    rows = []
    for label, gpus, precision, limit, time_s, energy_j in TOY:
        for rep in range(reps):
            rows.append(
                {
                    "sweep": "toy", "status": "ok", "config_hash": label, "label": label,
                    "repetition": rep, "config_json": "{}", "model": "resnet50",
                    "stem": "cifar", "dataset": "cifar10", "device": "cuda", "gpus": gpus,
                    "world_size": gpus, "precision": precision, "batch_size": 256,
                    "power_limit_requested_w": limit, "power_limit_w": limit,
                    "duration_s": time_s, "energy_total_j": energy_j, "energy_gpu_j": energy_j,
                    "samples": 50000, "provenance": "measured",
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_region_per_group_differs_from_region_against_baseline():
    s = summarize(toy_runs(), baseline={"gpus": 1, "precision": "fp32", "power_limit_w": 300})
    region = [s.loc[h, "label"] for h in operating_region(s)]
    assert region == ["2xGPU fp32 250W", "1xGPU fp32 250W"]  # largest saving first
    against_baseline = [s.loc[h, "label"] for h in region_against_baseline(s)]
    assert sorted(against_baseline) == ["1xGPU bf16 250W", "1xGPU bf16 300W", "1xGPU fp32 250W"]
    effects = power_limit_effects(s).set_index("label")
    assert effects.loc["2xGPU fp32 250W", "energy_change"] == pytest.approx(-0.0625)
    assert effects.loc["2xGPU fp32 250W", "reference_label"] == "2xGPU fp32 300W"
    assert effects.loc["1xGPU bf16 250W", "energy_change"] == pytest.approx(590 / 600 - 1)
    assert not effects.loc["1xGPU bf16 250W", "in_operating_region"]
    assert effects["is_reference"].sum() == 3  # one 300 W reference per group
    assert not effects.loc[effects["is_reference"], "in_operating_region"].any()


def test_thresholds_change_the_region():
    s = summarize(toy_runs())
    # 5 % saving leaves only the 2-GPU cap (6.25 %); 1.5 % slowdown drops it (+1.8 %)
    assert [s.loc[h, "label"] for h in operating_region(s, min_saving=0.05)] == ["2xGPU fp32 250W"]
    assert [s.loc[h, "label"] for h in operating_region(s, max_penalty=0.015)] == [
        "1xGPU fp32 250W"
    ]
    # with no saving required the uncapped references themselves are still never in it
    everything = {s.loc[h, "label"] for h in operating_region(s, min_saving=0.0)}
    assert everything == {"1xGPU fp32 250W", "1xGPU bf16 250W", "2xGPU fp32 250W"}


@pytest.mark.slow
def test_json_flags_and_report_use_the_per_group_answer(tmp_path):
    runs = toy_runs()
    data = summary_to_json(summarize(runs), runs)
    configs = data["configurations"]
    flags = {c["label"]: (c["operating_region"], c["region_vs_baseline"]) for c in configs}
    assert flags["2xGPU fp32 250W"] == (True, False)
    assert flags["1xGPU bf16 300W"] == (False, True)
    assert sorted(data["operating_region"]) == ["1xGPU fp32 250W", "2xGPU fp32 250W"]
    assert "highest power limit" in data["criteria"]["region_reference"]
    paths = write_report(runs, None, None, tmp_path / "rep")
    md = paths.markdown.read_text()
    lines = md.splitlines()
    start = lines.index(next(x for x in lines if x.startswith("| Configuration | Runs |")))
    table = lines[start + 2 : lines.index("", start)]  # the configuration table's rows
    config_rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table]
    ticked = sorted(cells[0] for cells in config_rows if cells[-1] == "✓")
    assert ticked == ["1xGPU fp32 250W", "2xGPU fp32 250W"]
    assert "Against the baseline 1xGPU fp32 300W (not the operating region" in md
    assert "2xGPU fp32 250W (energy -6.2 %, time +1.8 % against 2xGPU fp32 300W)" in md


@pytest.mark.slow
def test_cli_region_flags(tmp_path):
    db = tmp_path / "toy.db"
    with open_store(db) as store:
        for _, row in toy_runs(reps=1).iterrows():
            store.insert_run({k: v for k, v in row.items() if pd.notna(v)})

    def report(*flags: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "wattlab.cli", "report", "--db", str(db), "--json", "-"]
        return subprocess.run([*cmd, *flags], capture_output=True, text=True, timeout=300)

    done = report("--region-min-saving", "0.05", "--region-max-slowdown", "0.02")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["operating_region"] == ["2xGPU fp32 250W"]
    assert data["criteria"]["min_saving"] == 0.05
    bad = report("--region-max-slowdown", "-0.1")
    assert bad.returncode == 2
    assert "--region-max-slowdown" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr
