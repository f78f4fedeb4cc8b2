"""What `wattlab sweep --executor slurm` prints: the submitted array, then a line per task."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from wattlab.cli.render import run_summary_line

if TYPE_CHECKING:
    from wattlab.experiment.executors.slurm import SlurmOptions, TaskRecord
    from wattlab.experiment.sweep.plan import PlanEntry, SweepPlan


def run_on_slurm_with_lines(
    plan: SweepPlan, opts: Any, slurm: SlurmOptions
) -> list[tuple[PlanEntry, Any]]:
    """Submit the plan as a SLURM job array and print one line per finished task (stderr)."""
    from wattlab.cli.sweep_view import outcome_line, stored_row
    from wattlab.experiment.executors.slurm import run_plan_on_slurm
    from wattlab.jsonio import bounded_part

    total: list[int] = [0]
    finished: list[int] = [0]

    def on_submit(tasks: list[TaskRecord], adopted: int) -> None:
        total[0] = len(tasks)
        if not tasks:
            print(f"sweep {plan.name}: nothing to submit.", file=sys.stderr)
            return
        arrays = sorted({t.job_id.split("_", 1)[0] for t in tasks})
        note = f" ({adopted} still running from an earlier submission)" if adopted else ""
        print(
            f"sweep {plan.name}: {len(tasks)} SLURM task(s) in job(s) {', '.join(arrays)}{note}; "
            f"results in {slurm.folder}/{bounded_part(plan.name)}/results",
            file=sys.stderr,
            flush=True,
        )

    def on_finish(entry: PlanEntry, outcome: Any) -> None:
        finished[0] += 1
        row = stored_row(opts.db_path, outcome, sweep=plan.name)
        line = run_summary_line(row) if row else outcome_line(entry, outcome)
        print(
            f"[{finished[0]}/{total[0]}] rep {entry.repetition} {line}", file=sys.stderr, flush=True
        )

    return run_plan_on_slurm(plan, opts, slurm, on_submit=on_submit, on_finish=on_finish)
