"""`wattlab compare` through the real CLI (``wattlab.cli.app.main``, in process) on databases
made by the store: its exit codes (1 on a regression, 0 otherwise, 2 on bad input in one
sentence), what it writes, and what it says of the sides' fingerprints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from wattlab.experiment.db.store import open_store

H200 = {"device": "cuda", "gpus": 1, "gpu_name": "NVIDIA H200", "power_limit_w": 700.0}


def make_db(
    path: Path,
    sweep: str,
    energies_j: list[float],
    *,
    config_hash: str = "cfg1",
    label: str = "resnet18 1xGPU tf32 bs256",
    start: str = "2026-12-05T01:00:00+00:00",
    **extra: object,
) -> Path:
    """A database with one ok run per energy (10 000 samples, 10 s each) of one configuration."""
    with open_store(path) as store:
        for rep, energy in enumerate(energies_j):
            store.insert_run(
                {
                    "sweep": sweep,
                    "status": "ok",
                    "config_hash": config_hash,
                    "repetition": rep,
                    "config_json": {"model": "resnet18"},
                    "label": label,
                    "samples": 10_000,
                    "duration_s": 10.0 * energy / energies_j[0],
                    "energy_total_j": energy,
                    "started_at": start,
                    "gpu_uuids": "GPU-1",
                    "wattlab_version": "0.2.0",
                    "code_commit": "a" * 40,
                    "code_dirty": 0,
                    "idle_power_w": 80.0,
                    **H200,
                    **extra,
                }
            )
    return path


def wattlab(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    from wattlab.cli.app import main

    monkeypatch.setattr(sys, "argv", ["wattlab", "compare", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return int(stop.value.code or 0), out.out, out.err


def energies(seed: int, n: int, change: float = 0.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(1000.0 * (1 + change) * np.exp(rng.normal(0, 0.01))) for _ in range(n)]


def test_no_change_passes_and_writes_markdown_and_json(tmp_path, monkeypatch, capsys) -> None:
    base = make_db(tmp_path / "base.db", "main", energies(1, 6))
    cand = make_db(tmp_path / "pr.db", "pr", energies(2, 6))
    code, out, err = wattlab(
        monkeypatch,
        capsys,
        f"{base}::main",
        f"{cand}::pr",
        "--markdown",
        str(tmp_path / "c.md"),
        "--json",
        str(tmp_path / "c.json"),
    )
    assert code == 0, err
    assert "energy gate passed" in out and "no detectable change" in out
    assert (tmp_path / "c.md").read_text().strip() == out.strip()
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["gate"] == "passed" and data["same_session"] is True
    energy = data["configurations"][0]["energy_per_sample_j"]
    assert energy["baseline_repetitions"] == energy["candidate_repetitions"] == 6
    assert energy["ratio_low"] < 1 < energy["ratio_high"]
    assert energy["repetitions_for_threshold"] >= 2


def test_a_regression_exits_1_and_names_the_configuration(tmp_path, monkeypatch, capsys) -> None:
    base = make_db(tmp_path / "base.db", "main", energies(1, 5))
    cand = make_db(tmp_path / "pr.db", "pr", energies(2, 5, change=0.12))
    code, out, _ = wattlab(monkeypatch, capsys, f"{base}::main", f"{cand}::pr")
    assert code == 1
    assert "energy gate FAILED" in out and "**regression**" in out
    assert "resnet18 1xGPU tf32 bs256" in out.split("\n\n")[1]  # the headline names it


def test_one_repetition_per_side_says_no_interval_and_passes(tmp_path, monkeypatch, capsys):
    base = make_db(tmp_path / "base.db", "main", [1000.0])
    cand = make_db(tmp_path / "pr.db", "pr", [1300.0])
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand))
    assert code == 0
    assert "No interval can be formed" in out
    assert "the baseline has 1 repetition and the candidate has 1 repetition" in out


def test_sides_far_apart_get_the_session_term(tmp_path, monkeypatch, capsys) -> None:
    base = make_db(tmp_path / "base.db", "main", energies(1, 6))
    cand = make_db(
        tmp_path / "pr.db", "pr", energies(2, 6, change=0.08), start="2026-12-09T01:00:00+00:00"
    )
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand), "--json", "-")
    data = json.loads(out)
    assert data["same_session"] is False and data["session_sd_log"] > 0
    energy = data["configurations"][0]["energy_per_sample_j"]
    assert energy["repetitions_for_threshold"] is None  # no repetitions beat the session floor
    assert code == 0  # 8 % is within what two sessions can tell apart
    code, out, _ = wattlab(
        monkeypatch, capsys, str(base), str(cand), "--session-noise", "0", "--json", "-"
    )
    assert code == 1 and json.loads(out)["session_sd_log"] == 0


def test_a_hardware_mismatch_is_refused_unless_allowed(tmp_path, monkeypatch, capsys) -> None:
    base = make_db(tmp_path / "base.db", "main", energies(1, 3))
    cand = make_db(
        tmp_path / "pr.db", "pr", energies(2, 3), gpu_name="NVIDIA A100", torch_version="2.5.1"
    )
    code, out, err = wattlab(monkeypatch, capsys, str(base), str(cand))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "NVIDIA H200 against NVIDIA A100" in lines[0]
    assert "--allow-hardware-mismatch" in lines[0]
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand), "--allow-hardware-mismatch")
    assert code == 0
    assert "| GPU (hardware) | NVIDIA H200 | NVIDIA A100 |" in out
    assert "| torch | not recorded | 2.5.1 |" in out


def test_runs_are_selected_by_code_commit(tmp_path, monkeypatch, capsys) -> None:
    db = make_db(tmp_path / "w.db", "main", energies(1, 3))
    make_db(db, "pr", energies(2, 3, change=0.2), code_commit="b" * 40)
    code, out, _ = wattlab(
        monkeypatch,
        capsys,
        str(db),
        str(db),
        "--baseline-commit",
        "aaaa",
        "--candidate-commit",
        "bbbb",
    )
    assert code == 1 and "| code commit | " + "a" * 40 + " | " + "b" * 40 + " |" in out


def test_one_configuration_each_is_compared_as_a_pair(tmp_path, monkeypatch, capsys) -> None:
    base = make_db(tmp_path / "base.db", "a", energies(1, 4))
    cand = make_db(
        tmp_path / "pr.db",
        "b",
        energies(2, 4, change=0.3),
        config_hash="cfg2",
        label="resnet18 1xGPU fp32 bs256",
    )
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand))
    assert code == 1
    assert "resnet18 1xGPU tf32 bs256 -> resnet18 1xGPU fp32 bs256" in out
    assert "compared as a pair" in out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["missing.db", "missing.db"], "no wattlab database at missing.db"),
        (["{db}::nope", "{db}"], "holds no ok run of sweep 'nope' (its sweeps: main)"),
        (["{db}::", "{db}"], "neither DB nor DB::SWEEP"),
        (["{db}", "{db}", "--baseline-commit", "ffff"], "was made at code commit ffff"),
        (["{db}", "{db}", "--config", "zzz"], "matches --config zzz"),
        (["{db}", "{db}", "--threshold", "0"], "--threshold"),
        (["{db}", "{db}", "--confidence", "1.5"], "--confidence"),
        (["{db}", "{db}", "--markdown", "{tmp}/x", "--json", "{tmp}/x"], "the same file"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys, args, said) -> None:
    monkeypatch.chdir(tmp_path)
    db = make_db(tmp_path / "w.db", "main", energies(1, 2))
    given = [a.format(db=db, tmp=tmp_path) for a in args]
    code, out, err = wattlab(monkeypatch, capsys, *given)
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in err


def test_a_version_7_database_is_read_its_fingerprint_not_recorded(tmp_path, monkeypatch, capsys):
    import sqlite3

    old = make_db(tmp_path / "old.db", "main", energies(1, 3))
    conn = sqlite3.connect(old)  # as wattlab 0.2.0 wrote it: no fingerprint columns
    new_columns = (
        "wattlab_version",
        "code_commit",
        "code_dirty",
        "torch_version",
        "cuda_version",
        "cudnn_version",
    )
    keep = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] not in new_columns]
    conn.execute(f"CREATE TABLE runs_old AS SELECT {', '.join(keep)} FROM runs")
    conn.execute("DROP TABLE runs")
    conn.execute("ALTER TABLE runs_old RENAME TO runs")
    conn.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    cand = make_db(tmp_path / "pr.db", "pr", energies(2, 3))
    code, out, err = wattlab(monkeypatch, capsys, str(old), str(cand))
    assert code == 0, err
    assert "| wattlab | not recorded | 0.2.0 |" in out
    assert "| code commit | not recorded | " + "a" * 40 + " |" in out


def test_the_gpu_power_before_runs_is_not_called_idle_when_it_came_right_after_a_run(
    tmp_path, monkeypatch, capsys
) -> None:
    """The H100 gate's own database (cooldown_s 0): readings a moment after the previous run
    show its tail (~250 W against 70 W at rest). compare says so, counted from the runs'
    start and end times, not "idle"."""
    import datetime as dt
    import gzip
    import shutil
    import sqlite3

    raw = Path(__file__).resolve().parents[2] / "docs/measured/h100-compare-gpu-2026-12-05"
    db = tmp_path / "c.db"
    with gzip.open(raw / "compare.db.gz", "rb") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select sweep, started_at, finished_at from runs where sweep in ('cmp-a1', 'cmp-b')"
        ).fetchall()
    moments = [
        (sweep, dt.datetime.fromisoformat(a), dt.datetime.fromisoformat(b)) for sweep, a, b in rows
    ]

    def soon(side: str) -> int:
        return sum(
            any(0 <= (start - end).total_seconds() < 10 for _, _, end in moments)
            for sweep, start, _ in moments
            if sweep == side
        )

    out_json = tmp_path / "ab.json"
    code, out, _ = wattlab(
        monkeypatch,
        capsys,
        f"{db}::cmp-a1",
        f"{db}::cmp-b",
        "--json",
        str(out_json),
        "--session-noise",
        "0",  # the two sweeps ran one after the other: without this, the session term
    )
    assert code == 1  # the batch-384 regression
    assert "Idle GPU power" not in out and "GPU power just before the runs:" in out
    assert soon("cmp-a1") == 7 and soon("cmp-b") == 7  # the first of each followed a warm-up
    assert "Not the cards at rest: at least 7 of 8 (baseline) and 7 of 8 (candidate)" in out
    sides = json.loads(out_json.read_text())
    assert sides["baseline"]["idle_readings_not_at_rest"] == soon("cmp-a1")
    assert sides["candidate"]["idle_readings"] == 8
