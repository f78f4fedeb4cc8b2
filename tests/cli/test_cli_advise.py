"""`wattlab advise` and `wattlab advise evaluate` through the CLI: the table, --json, a stored
run, and bad input as one sentence with exit code 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.in_process import wattlab_in_process

BEFORE = ["advise", "--model", "resnet18", "--gpu-name", "H200", "--epochs", "16",
          "--train-size", "3584"]  # fmt: skip


def wattlab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in this process (tests/in_process.py: a fresh interpreter paid ~4.5 s of CPU
    importing torch to count the model's cost); its PRE cache is the session's
    (tests/conftest.py), so only the first fit of the shipped runs pays."""
    return wattlab_in_process(*args, cwd=cwd)


def one_sentence_exit_2(done: subprocess.CompletedProcess, match: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wattlab: error: "), done.stderr
    assert match in lines[0], lines[0]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--allow", "precision,turbo"], "unknown knob 'turbo'"),
        (["--max-slowdown", "-3"], "--max-slowdown must be a number from 0"),
        (["--max-slowdown", "5", "--deadline-s", "100"], "not both"),
        (["--db", "nowhere.db", "--run", "3"], "leave out --model"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path, extra: list[str], match: str) -> None:
    one_sentence_exit_2(wattlab(*BEFORE, *extra, cwd=tmp_path), match)


def test_a_missing_database_or_half_a_stored_run_is_refused(tmp_path: Path) -> None:
    one_sentence_exit_2(
        wattlab("advise", "--db", "nowhere.db", "--run", "3", cwd=tmp_path),
        "no database at nowhere.db",
    )
    one_sentence_exit_2(wattlab("advise", "--db", "nowhere.db", cwd=tmp_path), "give both --db")


@pytest.mark.slow  # fits PRE on the reference set (once per module), imports torch
@pytest.mark.extra("train")  # counts the model's cost
def test_the_table_the_sentence_and_json(tmp_path: Path) -> None:
    done = wattlab(*BEFORE, "--max-slowdown", "5", "--json", "advice.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "energy kJ" in out and "saving" in out and "(current) predicted" in out
    doc = json.loads((tmp_path / "advice.json").read_text())
    rows = doc["rows"]
    assert rows[0]["rank"] == 1 and doc["advice"].startswith("Change ")
    assert doc["advice"] in out
    meeting = [r for r in rows if r["meets_limit"]]
    assert rows[: len(meeting)] == meeting  # the rows that meet the limit come first
    # ... least energy first among the current one and the changes that save >= 5 %; changes
    # predicted to save less (within PRE's error) come after the current configuration
    leading = [r for r in meeting if r["is_current"] or r["saving"] >= 0.05]
    assert meeting[: len(leading)] == leading
    assert [r["energy_j"] for r in leading] == sorted(r["energy_j"] for r in leading)
    current = next(r for r in rows if r["is_current"])
    assert all(r["duration_s"] <= current["duration_s"] * 1.05 + 1e-9 for r in meeting)
    assert {r["batch_size"] for r in rows} == {256}  # batch only with --allow batch
    assert any(r["power_limit_w"] for r in rows)  # power limits: allowed by default
    assert any("CUDA graphs are not advised" in n for n in doc["notes"])
    assert any("one GPU only" in n for n in doc["notes"])
    for row in rows:
        assert row["energy_low_j"] <= row["energy_j"] <= row["energy_high_j"]
        assert row["co2e_low_kg"] <= row["co2e_kg"] <= row["co2e_high_kg"]


@pytest.mark.slow
@pytest.mark.extra("train")  # counts the model's cost
def test_allow_batch_says_so_and_a_deadline_below_the_fastest_is_exit_2(tmp_path: Path) -> None:
    done = wattlab(*BEFORE, "--allow", "precision,batch", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    from wattlab.estimate.reference import load_default_reference

    measured = {int(b) for b in load_default_reference()[0]["batch_size"]}
    assert {r["batch_size"] for r in doc["rows"]} == measured  # the batch sizes PRE has seen
    assert any("changes convergence" in n for n in doc["notes"])
    one_sentence_exit_2(
        wattlab(*BEFORE, "--deadline-s", "0.01", cwd=tmp_path),
        "no allowed configuration meets the deadline of 0.01 s: the fastest",
    )


def _stored_run(db: Path) -> int:
    from wattlab.experiment.db.store import open_store

    trace_w = [560.0, 640.0] * 5
    with open_store(db) as store:
        return store.insert_run(
            {
                "status": "ok", "config_hash": "adv", "config_json": {"model": "resnet18"},
                "label": "resnet18 1xGPU fp32 bs256", "model": "resnet18", "device": "cuda",
                "gpus": 1, "precision": "fp32", "batch_size": 256, "epochs": 16,
                "samples": 57_344, "train_size": 3584, "image_size": 32, "stem": "cifar",
                "duration_s": 10.0, "energy_total_j": 6400.0, "energy_gpu_j": 6000.0,
                "gpu_name": "NVIDIA H200", "gpu_tdp_w": 700.0, "power_limit_w": 700.0,
                "co2e_kg": 3.6e-4, "co2e_low_kg": 1.8e-4, "co2e_high_kg": 5.3e-4,
            },
            [{"name": "budget", "start_s": 0.0, "duration_s": 10.0, "energy_total_j": 6000.0}],
            [(0.5 + i, "gpu:0", w) for i, w in enumerate(trace_w)],
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.extra("train")  # counts the model's cost
def test_advice_from_a_stored_run(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = _stored_run(db)
    done = wattlab("advise", "--db", str(db), "--run", str(run_id), "--json", "-",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    current = next(r for r in doc["rows"] if r["is_current"])
    assert (current["energy_j"], current["duration_s"]) == (6400.0, 10.0)
    assert current["source"] == f"measured (run {run_id})"
    assert any(f"PRE corrected by run {run_id}" in n for n in doc["notes"])
    one_sentence_exit_2(
        wattlab("advise", "--db", str(db), "--run", "99", cwd=tmp_path),
        "there is no run with id 99 in the database.",
    )


@pytest.mark.slow  # one leave-one-model-out fold: fits PRE on six models
def test_evaluate_one_held_out_model_writes_its_scores(tmp_path: Path) -> None:
    done = wattlab("advise", "evaluate", "--models", "resnet18", "--json", "eval.json",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "median regret" in done.stdout and "PRE per held-out model: resnet18" in done.stdout
    doc = json.loads((tmp_path / "eval.json").read_text())
    ref = doc["reference"]
    assert [f["model"] for f in ref["folds"]] == ["resnet18"]
    # 12 starting configurations on the H200 and 6 on the H100 (issue 47), x 4 limits, per knob
    # set: a configuration is known by its GPU too
    assert ref["summary"]["precision"]["all"]["advisor"]["n"] == 72
    picks = [p for p in ref["picks"] if p["knobs"] == "precision"]
    assert len(picks) == 72
    assert {p["gpu"] for p in picks} == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    for pick in picks:
        assert pick["regret"] >= 0 or pick["violation"]  # below the best only by breaking it
        if pick["max_slowdown"] == "none":
            assert not pick["violation"]
    # the power-limit knob is scored on the packaged Zeus profiles unless --profiles names others
    assert doc["power_limits"]["files"] == 12
    one_sentence_exit_2(
        wattlab("advise", "evaluate", "--models", "alexnet", cwd=tmp_path),
        "--models names 'alexnet'",
    )


@pytest.mark.slow
@pytest.mark.extra("train")  # counts the model's cost
def test_report_with_advice_has_the_section_in_markdown_html_and_json(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = _stored_run(db)
    done = wattlab("report", "--db", str(db), "--out", "rep", "--advice", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "rep" / "report.md").read_text()
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "## Advice" in markdown and "Advice</h2>" in html
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    (row,) = summary["advice"]  # one configuration: the baseline
    assert row["role"] == "baseline" and row["run_id"] == run_id
    assert row["change"].startswith("precision fp32 -> ") and row["saving"] > 0.05
    plain = wattlab("report", "--db", str(db), "--out", "plain", cwd=tmp_path)
    assert (
        plain.returncode == 0 and "## Advice" not in (tmp_path / "plain" / "report.md").read_text()
    )
