"""What `wattlab run --json` and `wattlab sweep --json` write, built by the library."""

from __future__ import annotations

from wattlab.experiment.db.record import RunOutcome
from wattlab.experiment.result_json import run_result, sweep_result, sweep_results
from wattlab.experiment.sweep.plan import MachineFacts, PlanEntry, SweepPlan
from wattlab.train.config import RunConfig


def _plan() -> SweepPlan:
    config = RunConfig(epochs=1)
    entries = [
        PlanEntry(1, config, 0, "a", "h1", "run"),
        PlanEntry(2, config, 1, "a", "h1", "run"),
        PlanEntry(3, config, 0, "b", "h2", "done"),
    ]
    return SweepPlan(name="s", entries=entries, order_seed=7, warmup_runs=0, cooldown_s=0.0)


def test_a_run_result_is_its_row_and_the_intensity_that_priced_it() -> None:
    row = {"id": 3, "energy_total_j": 12.5, "co2e_kg": 1e-6}
    assert run_result(row, "region FRA") == {**row, "intensity_source": "region FRA"}
    assert "intensity_source" not in row  # the stored row is not changed


def test_a_sweep_result_is_its_plan_with_one_result_per_run_started() -> None:
    plan = _plan()
    ok = RunOutcome(run_id=10, status="ok")
    failed = RunOutcome(run_id=11, status="failed", error="CUDA out of memory")
    data = sweep_result(plan, [(plan.entries[0], ok), (plan.entries[1], failed)])
    assert data["sweep"] == "s" and [r["action"] for r in data["runs"]] == ["run", "run", "done"]
    assert data["results"] == [
        {"order": 1, "label": "a", "repetition": 0, "run_id": 10, "status": "ok", "error": None},
        {
            "order": 2,
            "label": "a",
            "repetition": 1,
            "run_id": 11,
            "status": "failed",
            "error": "CUDA out of memory",
        },
    ]


def test_a_command_runs_result_carries_its_exit_code() -> None:
    plan = _plan()
    outcome = RunOutcome(run_id=4, status="failed", error="exit 3", exit_code=3)
    (result,) = sweep_results([(plan.entries[0], outcome)])
    order = ["order", "label", "repetition", "run_id", "status", "exit_code", "error"]
    assert list(result) == order
    assert result["exit_code"] == 3


def test_a_cluster_plans_without_power_limits() -> None:
    machine = MachineFacts.cluster()
    assert not machine.can_set_power_limits and machine.cuda_gpus >= 1024
    assert "SLURM" in machine.power_limit_reason
