"""Command sweeps without running anything slow: the spec, its placeholders, the dry run, the
budget channel (wattlab.budget against a BudgetServer) and sequential windows."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import wattlab
from wattlab.budget_marks import ENV_BUDGET_SOCKET, budget
from wattlab.errors import ConfigError
from wattlab.experiment.runs.command_meter import BudgetServer, sum_in_sequence
from wattlab.experiment.specs.command import CommandSweepSpec, program_name
from wattlab.experiment.specs.load import load_sweep_spec
from wattlab.experiment.specs.trainer import load_spec
from wattlab.meters.base import Provenance
from wattlab.monitor import EnergyMonitor, Measurement

SPEC = {
    "name": "mine",
    "command": ["python", "train.py", "--batch-size", "{batch_size}", "--precision={precision}"],
    "grid": {"batch_size": [64, 128], "precision": ["fp32", "bf16"]},
    "repetitions": 2,
    "order": "sequential",
    "baseline": {"batch_size": 64, "precision": "fp32"},
}


def spec(**changes: object) -> CommandSweepSpec:
    return CommandSweepSpec.from_dict({**SPEC, **changes})


def test_every_grid_point_gets_its_argv_label_and_columns() -> None:
    runs = spec().expand()
    assert len(runs) == 8
    first = runs[0].config
    assert first.argv == ["python", "train.py", "--batch-size", "64", "--precision=fp32"]
    assert first.model == "train.py" and first.label == "train.py batch_size=64 precision=fp32"
    assert first.columns == {"batch_size": 64, "precision": "fp32"}
    assert len({r.config_hash for r in runs}) == 4  # repetitions share their configuration
    assert [r.repetition for r in runs] == [0, 0, 0, 0, 1, 1, 1, 1]
    baseline = spec().baseline_config_hash()
    assert baseline == first.config_hash


def test_a_placeholder_naming_no_axis_is_one_sentence() -> None:
    with pytest.raises(ConfigError, match=r"command\[3\]: placeholder \{batch\} names no grid"):
        spec(command=["python", "train.py", "--bs", "{batch}", "{precision}", "{batch_size}"])
    with pytest.raises(ConfigError, match="names no grid axis"):
        spec(command=["python", "train.py", "{}", "{precision}", "{batch_size}"])


def test_an_axis_no_placeholder_uses_is_one_sentence() -> None:
    with pytest.raises(ConfigError, match=r"grid\.seed: no placeholder uses this axis"):
        spec(grid={**SPEC["grid"], "seed": [1, 2]})  # type: ignore[dict-item]
    # an axis used only in env counts as used
    used = spec(
        grid={**SPEC["grid"], "seed": [1, 2]},  # type: ignore[dict-item]
        env={"SEED": "{seed}"},
        baseline={"batch_size": 64, "precision": "fp32", "seed": 1},
    )
    assert used.expand()[0].config.env == {"SEED": "1"}


def test_other_mistakes_are_one_sentence() -> None:
    with pytest.raises(ConfigError, match="expected a list of arguments"):
        spec(command="python train.py")
    with pytest.raises(ConfigError, match="no base"):
        spec(base={"model": "resnet18"})
    with pytest.raises(ConfigError, match="baseline.batch_size"):
        spec(baseline={"batch_size": 32, "precision": "fp32"})
    with pytest.raises(ConfigError, match="appears twice"):
        spec(grid={"batch_size": [64, "64"], "precision": ["fp32"]})
    with pytest.raises(ConfigError, match="give the same command"):
        CommandSweepSpec.from_dict(
            {"name": "n", "command": ["x", "{a}{b}"], "grid": {"a": [1, 11], "b": [11, 1]}}
        ).expand(order_seed=1)


def test_program_names() -> None:
    assert program_name(["python3.11", "scripts/train.py", "-x"]) == "train.py"
    assert program_name(["python", "-m", "pkg.train"]) == "pkg.train"
    assert program_name(["./bench", "1"]) == "bench"


def test_load_spec_keeps_its_type_and_load_sweep_spec_takes_commands(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(json.dumps(SPEC))
    with pytest.raises(ConfigError, match="command sweep"):
        load_spec(str(path))
    assert isinstance(load_sweep_spec(str(path)), CommandSweepSpec)
    with pytest.raises(ConfigError, match="device cannot be set"):
        load_sweep_spec(str(path), device="cpu")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wattlab.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_dry_run_plan_holds_each_argv_and_needs_no_database(tmp_path: Path) -> None:
    from wattlab.experiment.sweep.command_plan import make_command_plan

    mine = spec(command=[sys.executable, "{batch_size}", "{precision}"])
    plan = make_command_plan(mine, None, register=False)
    assert [e.action for e in plan.entries] == ["run"] * 8
    assert plan.entries[0].reason.endswith("64 fp32")  # the command, shown in the plan
    assert plan.entries[0].config.argv[1:] == ["64", "fp32"]


@pytest.mark.slow
def test_dry_run_lists_the_argvs_and_writes_nothing_and_errors_exit_2(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    good = dict(SPEC, command=[sys.executable, "train.py", "{batch_size}", "{precision}"])
    (tmp_path / "good.yaml").write_text(json.dumps(good))
    done = _cli("sweep", "good.yaml", "--db", "d.db", "--dry-run", "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [r["argv"][2:] for r in plan["runs"][:2]] == [["64", "fp32"], ["64", "bf16"]]
    assert not (tmp_path / "d.db").exists()
    bad = dict(good, command=[sys.executable, "train.py", "{batch}", "{precision}"])
    (tmp_path / "bad.yaml").write_text(json.dumps(bad))
    done = _cli("sweep", "bad.yaml", "--db", "d.db", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "{batch} names no grid axis" in done.stderr
    missing = dict(good, command=["no-such-program-here", "{batch_size}", "{precision}"])
    (tmp_path / "missing.yaml").write_text(json.dumps(missing))
    done = _cli("sweep", "missing.yaml", "--db", "d.db", cwd=tmp_path)
    assert done.returncode == 2 and "not a program on PATH" in done.stderr
    assert not (tmp_path / "d.db").exists()


# --- the budget channel --------------------------------------------------------------------
def test_budget_outside_wattlab_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BUDGET_SOCKET, raising=False)
    assert wattlab.budget is budget and "budget" in wattlab.__all__
    with wattlab.budget(samples=10) as mark:
        mark.samples = 12
    assert not mark.marked


def test_marks_open_and_close_windows_and_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monitor = EnergyMonitor(meters=[], sync=None).start()
    server = BudgetServer(monitor, tmp_path).start()
    monkeypatch.setenv(ENV_BUDGET_SOCKET, server.path)
    seen_open: list[list[str]] = []
    try:

        def script() -> None:
            with budget(samples=100) as first:
                seen_open.append(sorted(monitor.open_windows()))
                with budget():  # nested: counts once
                    pass
            with budget() as second:
                second.samples = 50
            assert first.marked and second.marked

        worker = threading.Thread(target=script)
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        segments = server.close()
        monitor.stop()
    assert seen_open == [["budget:1"]]  # the window was open while the block ran
    assert [s.samples for s in segments] == [100, 50]
    assert all(s.measurement is not None and s.end is not None for s in segments)
    assert server.errors == []


def test_a_block_the_process_never_ended_is_closed_by_the_server(tmp_path: Path) -> None:
    import socket

    monitor = EnergyMonitor(meters=[], sync=None).start()
    server = BudgetServer(monitor, tmp_path).start()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(server.path)
    conn.sendall(b'{"mark": "begin", "pid": 1, "monotonic_s": 0}\n')
    assert conn.recv(100) == b"ok\n"
    conn.close()  # died inside the block
    segments = server.close()
    monitor.stop()
    assert len(segments) == 1 and segments[0].end is None
    assert segments[0].to_dict()["ended_by"] == "process exit"


def _window(duration_s: float, energy_j: float, provenance: Provenance) -> Measurement:
    return Measurement(
        name="x",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=duration_s,
        energy_j={"cpu:0": energy_j},
        provenance={"cpu:0": provenance},
        uncertainty_j={"cpu:0": energy_j / 10},
        in_total={"cpu:0": True},
    )


def test_blocks_in_sequence_add_up() -> None:
    total = sum_in_sequence(
        [_window(1.0, 10.0, Provenance.MEASURED), _window(2.0, 30.0, Provenance.SAMPLED)], "b"
    )
    assert total.name == "b" and total.duration_s == pytest.approx(3.0)
    assert total.total_energy_j == pytest.approx(40.0)
    assert total.uncertainty_j["cpu:0"] == pytest.approx(4.0)
    assert total.provenance["cpu:0"] is Provenance.SAMPLED


def test_the_default_cool_down_is_10_s_and_keeps_the_hash_of_sweeps_begun_before() -> None:
    default = spec()
    assert "cooldown_s" not in default.model_fields_set and default.cooldown_s == 10.0
    assert default.warmup_runs == 1
    # before the default became 10 s it was 60: a spec that leaves it out keeps that hash, so
    # a sweep begun then resumes as the same sweep
    assert default.spec_hash() == spec(cooldown_s=60.0).spec_hash()
    assert spec(cooldown_s=10.0).spec_hash() != default.spec_hash()
