"""The one sweep loop (``experiment.sweep.driver``) with a run kind of the test's own: the loop
is the same for every kind, so a third kind needs no loop of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wattlab.experiment.db.record import RunOutcome
from wattlab.experiment.db.store import open_store
from wattlab.experiment.sweep.driver import PlanEntry, SweepPlan, drive


class ToyKind:
    """A run kind that records what the loop asked of it and advances a fake clock."""

    def __init__(self, clock: list[float], run_s: float = 10.0) -> None:
        self.clock = clock
        self.run_s = run_s
        self.calls: list[str] = []

    def __enter__(self) -> ToyKind:
        self.calls.append("enter")
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls.append("exit")

    def prepare(self, todo: list[PlanEntry]) -> None:
        self.calls.append(f"prepare {len(todo)}")

    def warm_up(self, entry: PlanEntry) -> None:
        self.calls.append(f"warm-up {entry.label}")

    def run(self, entry: PlanEntry, sweep: str, identity: tuple[int, int] | None) -> RunOutcome:
        self.calls.append(f"run {entry.label}")
        self.clock[0] += self.run_s
        return RunOutcome(None, "ok", None)


def _plan(n: int, *, warmup_runs: int = 1, expected_s: float | None = None) -> SweepPlan:
    entries = [
        PlanEntry(i + 1, None, 0, f"p{i}", f"h{i}", "run", expected_s=expected_s) for i in range(n)
    ]
    entries.append(PlanEntry(n + 1, None, 0, "stored", "hx", "done", "already stored as ok"))
    return SweepPlan("toy", entries, 1, warmup_runs, 0.0)


def _db(tmp_path: Path) -> str:
    db = tmp_path / "w.db"
    with open_store(db) as store:
        store.register_sweep("toy", {"name": "toy"}, "hash", 1)
    return str(db)


def test_the_loop_enters_the_kind_warms_up_and_runs_every_run_entry_in_order(
    tmp_path: Path,
) -> None:
    kind = ToyKind([0.0])
    started: list[str] = []
    outcomes = drive(
        _plan(3, warmup_runs=2),
        kind,
        _db(tmp_path),
        on_start=lambda e: started.append(e.label),
        clock=lambda: kind.clock[0],
    )
    assert kind.calls == [
        "enter",
        "prepare 3",
        "warm-up p0",
        "warm-up p0",
        "run p0",
        "run p1",
        "run p2",
        "exit",
    ]
    assert started == ["p0", "p1", "p2"]
    assert [e.label for e, _ in outcomes] == ["p0", "p1", "p2"]


def test_a_deadline_stops_the_loop_before_a_run_that_would_cross_it_and_says_so(
    tmp_path: Path,
) -> None:
    clock = [100.0]
    kind = ToyKind(clock, run_s=10.0)
    plan = _plan(5, warmup_runs=0, expected_s=10.0)
    # 25 s: two runs of 10 s fit, the third (expected to end at 130 s) would cross 125 s
    outcomes = drive(plan, kind, _db(tmp_path), stop_at=125.0, clock=lambda: clock[0])
    assert [e.label for e, _ in outcomes] == ["p0", "p1"]
    assert any("3 of 5 run(s) not started" in note for note in plan.notes)


def test_without_an_expected_duration_the_deadline_is_checked_before_each_run(
    tmp_path: Path,
) -> None:
    clock = [0.0]
    kind = ToyKind(clock, run_s=10.0)
    plan = _plan(4, warmup_runs=0)
    outcomes = drive(plan, kind, _db(tmp_path), stop_at=15.0, clock=lambda: clock[0])
    assert [e.label for e, _ in outcomes] == ["p0", "p1"]  # p1 starts at 10 s < 15 s


def test_an_entry_stored_ok_since_the_plan_was_made_is_not_run_again(tmp_path: Path) -> None:
    db = _db(tmp_path)
    with open_store(db) as store:
        row = {"sweep": "toy", "config_hash": "h1", "repetition": 0, "label": "p1"}
        run_id = store.claim_run({**row, "config_json": {}, "hostname": "here", "pid": 1})
        store.finish_run(run_id, {**row, "config_json": {}, "status": "ok"})
    kind = ToyKind([0.0])
    drive(_plan(3, warmup_runs=0), kind, db, clock=lambda: 0.0)
    assert [c for c in kind.calls if c.startswith("run")] == ["run p0", "run p2"]


def test_the_trainer_and_the_command_sweep_run_through_the_same_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import wattlab.experiment.sweep.command_plan as command_plan
    import wattlab.experiment.sweep.plan as trainer_plan

    kinds: list[str] = []

    def fake_drive(plan: SweepPlan, kind: Any, db_path: str, **_: Any) -> list[Any]:
        kinds.append(type(kind).__name__)
        return []

    monkeypatch.setattr(trainer_plan, "drive", fake_drive)
    monkeypatch.setattr(command_plan, "drive", fake_drive)
    from wattlab.experiment.options import WorkerOptions

    plan = SweepPlan("s", [], None, 0, 0.0)
    trainer_plan.run_plan(plan, WorkerOptions(db_path="x.db"))
    command_plan.run_command_plan(plan, command_plan.CommandOptions(db_path="x.db"))
    assert kinds == ["TrainerKind", "CommandKind"]


def test_a_timed_budget_is_expected_to_take_its_seconds_and_the_rest_of_a_run() -> None:
    import pandas as pd

    from wattlab.experiment.sweep.plan import expected_duration_s
    from wattlab.train.config import RunConfig

    history = pd.DataFrame(
        {
            "status": ["ok", "ok"],
            "config_hash": ["other", "other2"],
            "model": ["resnet18", "resnet18"],
            "device": ["cpu", "cpu"],
            "samples": [512, 1024],
            "wall_s": [9.0, 13.0],
            "duration_s": [5.0, 8.0],
        }
    )
    cfg = RunConfig(model="resnet18", device="cpu", budget_s=3.0, warmup_steps=3)
    # the other runs spent 4 and 5 s outside their budget: median 4.5 s, plus 3 s of budget
    assert expected_duration_s(cfg, history) == pytest.approx(7.5)


def test_a_ctrl_c_that_a_library_swallowed_still_stops_the_sweep_before_its_next_run(
    tmp_path: Path,
) -> None:
    """The command's handlers note every stop signal; one whose KeyboardInterrupt a library ate
    (torch's C start-up does, importing numpy) stops the loop before it starts a run."""
    import os
    import signal
    import time

    from wattlab import stop_signals

    class Swallows(ToyKind):
        def prepare(self, todo: list[PlanEntry]) -> None:
            super().prepare(todo)
            try:  # a library's start-up, eating what is raised meanwhile
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                pass

    kind = Swallows([0.0])
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stop_signals.install()
    try:
        stop_signals.raise_if_swallowed()  # nothing arrived since install: no-op
        with pytest.raises(KeyboardInterrupt):
            drive(_plan(2, warmup_runs=1), kind, _db(tmp_path), clock=lambda: 0.0)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        stop_signals.RECEIVED.clear()
    assert kind.calls == ["enter", "prepare 2", "exit"]  # no warm-up, no run
