"""`wattlab compare` on sides measured interleaved in one sweep (``--sides``), on sides run one
after the other, on modelled energy and on the same runs given twice (issue 49): through the
real CLI (in process) on databases made by the store."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np

from tests.cli.test_cli_compare import make_db, wattlab
from wattlab.experiment.db.store import open_store

T0 = dt.datetime(2026, 12, 5, 1, 0, tzinfo=dt.timezone.utc)
ESTIMATED_CPU = {"cpu:0": {"energy_j": 1.0, "provenance": "estimated", "in_total": True}}


def interleaved_db(
    path: Path,
    n_pairs: int,
    *,
    change: float = 0.0,
    drift_per_run: float = 0.0,
    noise: float = 0.01,
    order: str = "abba",
    seed: int = 0,
    load_1min: float | None = None,
) -> Path:
    """One command sweep of two grid points side=a and side=b run in the order ABBA..., each run
    a second after the one before, their energy rising by ``drift_per_run`` (a fraction) per
    run: a drift that falls on both sides; b costs ``change`` more. Energy is modelled."""
    rng = np.random.default_rng(seed)
    with open_store(path) as store:
        store.register_sweep(
            "ci",
            {"name": "ci", "command": ["python", "w.py", "{side}"], "grid": {"side": ["a", "b"]},
             "order": order},
            "h" * 16,
            0,
        )  # fmt: skip
        k = 0
        for rep in range(n_pairs):
            for side in ("a", "b") if rep % 2 == 0 else ("b", "a"):
                energy = 100.0 * (1 + drift_per_run) ** k * float(np.exp(rng.normal(0, noise)))
                energy *= 1 + change if side == "b" else 1
                idle = {"host": {"load_1min": load_1min, "cpus": 2}} if load_1min else None
                store.insert_run(
                    {
                        "sweep": "ci",
                        "status": "ok",
                        "config_hash": f"hash-{side}",
                        "repetition": rep,
                        "config_json": {"kind": "command", "axes": {"side": side}},
                        "label": f"w.py side={side}",
                        "samples": 1000,
                        "duration_s": energy / 10,
                        "energy_total_j": energy,
                        "components_json": {
                            "cpu:0": {
                                "energy_j": energy,
                                "provenance": "estimated",
                                "utilisation": "process-tree",
                            }
                        },
                        "started_at": (T0 + dt.timedelta(seconds=k)).isoformat(),
                        "finished_at": (T0 + dt.timedelta(seconds=k + 0.9)).isoformat(),
                        "device": "cpu",
                        "gpus": 0,
                        "idle_json": idle,
                    }
                )
                k += 1
    return path


def test_sides_out_of_one_abba_sweep_are_paired_and_a_shared_drift_drops_out(
    tmp_path, monkeypatch, capsys
) -> None:
    """A/A with a drift of 2 % per run (the machine got busier through the sweep): the paired
    analysis of the interleaved sides passes; comparing the first half against the second, as
    two sweeps one after the other would, is what cried wolf."""
    db = interleaved_db(tmp_path / "ci.db", 8, drift_per_run=0.02, load_1min=1.5)
    code, out, err = wattlab(
        monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,b", "--json", str(tmp_path / "c.json")
    )
    assert code == 0, err
    assert "Paired analysis for 1 of 1 configuration(s) (8 pairs)" in out
    assert "run order: abba" in out and "told apart by its grid axis side: a against b" in out
    assert "The sides ran interleaved" in out
    assert "| 1-minute load average per CPU (mean) | 0.75 | 0.75 |" in out
    data = json.loads((tmp_path / "c.json").read_text())
    energy = data["configurations"][0]["energy_per_sample_j"]
    assert energy["analysis"] == "paired" and energy["baseline_repetitions"] == 8
    assert data["timing"] == "interleaved" and data["one_sweep"] is True
    assert data["session_sd_log"] == 0 and data["baseline"]["axis_value"] == "a"
    # the same form with the axis named twice
    code, out, _ = wattlab(monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,side=b")
    assert code == 0 and "Paired analysis" in out


def test_a_change_is_caught_by_the_paired_analysis_through_a_drift(
    tmp_path, monkeypatch, capsys
) -> None:
    db = interleaved_db(tmp_path / "ci.db", 8, change=0.10, drift_per_run=0.02)
    code, out, _ = wattlab(monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,b", "--json", "-")
    data = json.loads(out)
    energy = data["configurations"][0]["energy_per_sample_j"]
    assert code == 1 and data["gate"] == "failed"
    assert 1.05 < energy["ratio"] < 1.15 and energy["ratio_low"] > 1


def test_modelled_energy_is_said_and_the_verdict_says_it_judges_a_model(
    tmp_path, monkeypatch, capsys
) -> None:
    db = interleaved_db(tmp_path / "ci.db", 4)
    code, out, _ = wattlab(monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,b")
    headline = out.split("\n\n")[1]
    assert "This verdict judges a model, not a measurement: 100.0 % of the baseline's" in headline
    assert "The model: wattlab estimated the CPU" in headline  # what it assumed: whose load
    assert "the CPU time of the measured process tree" in headline
    assert "What was measured: baseline estimated (CPU); candidate estimated (CPU)." in out
    code, out, _ = wattlab(monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,b", "--json", "-")
    data = json.loads(out)
    assert data["judges_a_model"] is True and data["candidate"]["estimated_share"] == 1.0
    assert "judges a model" in data["headline"]


def test_measured_energy_is_not_called_a_model(tmp_path, monkeypatch, capsys) -> None:
    base = make_db(tmp_path / "base.db", "main", [1000.0, 1010.0, 990.0])
    cand = make_db(tmp_path / "pr.db", "pr", [1000.0, 1005.0, 995.0])
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand))
    assert code == 0 and "judges a model" not in out


def test_sides_run_one_after_the_other_on_a_cpu_are_two_sessions(
    tmp_path, monkeypatch, capsys
) -> None:
    """Two sweeps 10 minutes apart on a machine with no GPU: the load may have changed in
    between, so the output says they ran one after the other and the session term is added
    (it was left out for runs without a GPU within an hour)."""
    cpu = {"device": "cpu", "gpus": 0, "gpu_name": None, "power_limit_w": None, "gpu_uuids": None}
    base = make_db(tmp_path / "a.db", "a", [100.0, 101.0, 99.0], **cpu)
    cand = make_db(
        tmp_path / "b.db", "b", [100.0, 100.5, 99.5], start="2026-12-05T01:10:00+00:00", **cpu
    )
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand), "--json", "-")
    data = json.loads(out)
    assert data["timing"] == "sequential" and data["same_session"] is False
    assert data["session_sd_log"] > 0
    code, out, _ = wattlab(monkeypatch, capsys, str(base), str(cand))
    assert "The sides ran one after the other, not interleaved" in out
    assert "2026-12-05T01:00:00+00:00 to 2026-12-05T01:00:00+00:00" in out
    assert "run one after the other" in out  # the method says why the term is there


def test_the_same_runs_on_both_sides_are_refused(tmp_path, monkeypatch, capsys) -> None:
    db = make_db(tmp_path / "w.db", "main", [1000.0, 1010.0, 990.0])
    for args in ([str(db), str(db)], [f"{db}::main", str(tmp_path / "." / "w.db")]):
        code, out, err = wattlab(monkeypatch, capsys, *args)
        lines = err.strip().splitlines()
        assert code == 2 and out == "" and len(lines) == 1
        assert "both sides are the same 3 run(s)" in lines[0]


def test_sides_bad_input_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys) -> None:
    db = interleaved_db(tmp_path / "ci.db", 2)
    cases = [
        ([f"{db}::ci", "--sides", "side"], "expected AXIS=BASELINE,CANDIDATE"),
        ([f"{db}::ci", "--sides", "side=a,a"], "names the same value twice"),
        ([f"{db}::ci", "--sides", "batch=a,b"], "'batch' is not a grid axis of sweep 'ci'"),
        ([f"{db}::ci", "--sides", "side=a,c"], "'c' is not a value of grid axis 'side'"),
        ([str(db), "--sides", "side=a,b"], "--sides needs one sweep"),
        ([f"{db}::ci", f"{db}::ci", "--sides", "side=a,b"], "without a candidate"),
        ([f"{db}::ci"], "give a candidate"),
    ]
    for args, said in cases:
        code, out, err = wattlab(monkeypatch, capsys, *args)
        lines = err.strip().splitlines()
        assert code == 2 and out == "", args
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in err, (args, err)


def test_a_run_left_out_is_counted_on_its_own_side(tmp_path, monkeypatch, capsys) -> None:
    db = interleaved_db(tmp_path / "ci.db", 4)
    with open_store(db) as store:
        store.insert_run(
            {
                "sweep": "ci",
                "status": "ok",
                "config_hash": "hash-b",
                "repetition": 9,
                "config_json": {"kind": "command", "axes": {"side": "b"}},
                "label": "w.py side=b",
                "started_at": T0.isoformat(),
            }
        )  # no samples, energy or duration
    code, out, _ = wattlab(monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,b")
    assert code == 0
    from wattlab.analysis.markdown_text import md_text  # the note as the Markdown escapes it

    assert md_text(f"1 ok run(s) of {db}::ci [side=b] without an energy") in out
    assert md_text("[side=a] without") not in out


def test_a_sequential_order_is_said_not_to_cancel_a_drift(tmp_path, monkeypatch, capsys) -> None:
    db = interleaved_db(tmp_path / "ci.db", 4, order="sequential")
    code, out, _ = wattlab(monkeypatch, capsys, f"{db}::ci", "--sides", "side=a,b")
    assert code == 0 and "run order: sequential" in out
    assert "a steady drift of the machine is not cancelled between them" in out
    abba = interleaved_db(tmp_path / "abba.db", 4)
    code, out, _ = wattlab(monkeypatch, capsys, f"{abba}::ci", "--sides", "side=a,b")
    assert "not cancelled" not in out
