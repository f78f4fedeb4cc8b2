"""What `wattlab sweep` shows: the plan table, a progress bar with ETA, a line per run."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from wattlab.cli.render import make_console
from wattlab.experiment.runs.worker import WorkerOptions
from wattlab.experiment.sweep.command_plan import CommandOptions
from wattlab.experiment.sweep.plan import PlanEntry, SweepPlan, run_plan


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def print_plan(plan: SweepPlan, dry_run: bool) -> None:
    from rich.table import Table

    console = make_console()
    table = Table(title=f"sweep {plan.name}: plan" + (" (dry run)" if dry_run else ""))
    for col in ("#", "configuration", "rep", "action", "expected", "why"):
        table.add_column(col)
    for e in plan.entries:
        table.add_row(
            str(e.order),
            e.label,
            str(e.repetition),
            e.action,
            _fmt_s(e.expected_s) if e.action == "run" else "",
            e.reason,
        )
    console.print(table)
    n_run = len(plan.to_run)
    n_done = sum(e.action == "done" for e in plan.entries)
    n_skip = sum(e.action == "skip" for e in plan.entries)
    console.print(
        f"{n_run} to run, {n_done} already stored, {n_skip} skipped; order seed "
        f"{plan.order_seed}; warm-up runs {plan.warmup_runs}; cool-down {plan.cooldown_s:g} s; "
        f"expected duration {_fmt_s(plan.expected_s)}"
        + ("" if plan.expected_s is not None else " (no earlier runs of these configurations)")
    )
    for note in plan.notes:
        console.print(f"note: {note}")


def cool_down_line(plan: SweepPlan) -> str | None:
    """What the sweep says before it pauses between two runs (None: it does not pause)."""
    if plan.cooldown_s <= 0:
        return None
    why = "so that every run starts from an idle GPU"
    if plan.cooldown_until_c is not None:
        return (
            f"cooling down for up to {plan.cooldown_s:g} s, until every GPU is at or below "
            f"{plan.cooldown_until_c:g} C, {why} (cooldown_s, cooldown_until_c in the spec)"
        )
    return f"cooling down {plan.cooldown_s:g} s before the next run, {why} (cooldown_s in the spec)"


def warm_up_line(plan: SweepPlan) -> str | None:
    """What the sweep says before its untimed warm-up runs (None: it runs none)."""
    if plan.warmup_runs <= 0 or not plan.to_run:
        return None
    runs = "run" if plan.warmup_runs == 1 else "runs"
    return (
        f"warm-up: {plan.warmup_runs} untimed {runs} of {plan.to_run[0].label} first, not "
        "stored (warmup_runs in the spec)"
    )


def stored_row(db_path: str, outcome: Any, sweep: str | None = None) -> dict[str, Any] | None:
    """The stored row of a finished run, read without writing (None when it was not stored, or
    the database cannot be read now): showing a run never creates or changes the database,
    which the user may have removed meanwhile."""
    from wattlab.errors import WattlabError
    from wattlab.experiment.db.store import open_store

    if outcome.run_id is None or not getattr(outcome, "stored", True):
        return None
    try:
        with open_store(db_path, create=False, readonly=True, merge_kept=False) as store:
            runs = store.runs(sweep=sweep)
    except WattlabError:
        return None
    match = runs[runs["id"] == outcome.run_id]
    return match.iloc[0].to_dict() if len(match) else None


def outcome_line(entry: PlanEntry, outcome: Any) -> str:
    """A run's line when its stored row cannot be shown: 'not stored' when nothing of it
    could be written (the database vanished, say), else its status and error."""
    status = outcome.status if getattr(outcome, "stored", True) else "not stored"
    said = " ".join(str(outcome.error or "").split())
    said = said if len(said) <= 200 else said[:200] + "..."
    error = f" ({said})" if said else ""
    return f"{entry.label}: {status}{error}"


def failed_line(outcomes: list[tuple[PlanEntry, Any]], stored_with: str) -> str | None:
    """The sweep's last line when some runs did not end ok (None when all did): how many
    failed and were stored, and how many were not stored at all."""
    bad = [o for _, o in outcomes if o.status != "ok"]
    if not bad:
        return None
    lost = sum(not getattr(o, "stored", True) for o in bad)
    parts = []
    if len(bad) - lost:
        parts.append(
            f"{len(bad) - lost} of {len(outcomes)} runs failed (stored with {stored_with})"
        )
    if lost:
        parts.append(
            f"{lost} of {len(outcomes)} run(s) were not stored (the database could not be "
            "written; nothing of them is in it)"
        )
    return "wattlab: " + "; ".join(parts) + "; run the sweep again to retry them."


def run_with_progress(
    plan: SweepPlan,
    opts: WorkerOptions | CommandOptions,
    after_run: Callable[[int], None] | None = None,
    run: Callable[..., list[tuple[PlanEntry, Any]]] = run_plan,
) -> list[tuple[PlanEntry, Any]]:
    """Run the plan with a progress bar over the whole sweep and a summary line per run;
    ``after_run(run_id)`` is called for each stored run (e.g. to log it to MLflow). ``run``
    runs the plan (``run_plan``; ``run_command_plan`` for a sweep of a command)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from wattlab.cli.render import run_summary_line

    console = make_console(file=sys.stderr if not sys.stdout.isatty() else sys.stdout)
    todo = plan.to_run
    pause = cool_down_line(plan)
    warm_up = warm_up_line(plan)
    if warm_up is not None:
        console.print(warm_up)
    started = time.perf_counter()
    finished: list[float] = []

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("ETA {task.fields[eta]}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(plan.name, total=len(todo), eta=_fmt_s(plan.expected_s))

        def on_start(entry: PlanEntry) -> None:
            bar.update(task, description=f"{plan.name}: {entry.label} rep {entry.repetition}")

        def on_finish(entry: PlanEntry, outcome: Any) -> None:
            finished.append(time.perf_counter())
            done = len(finished)
            per_run = (finished[-1] - started) / done
            bar.update(task, advance=1, eta=_fmt_s(per_run * (len(todo) - done)))
            row = stored_row(opts.db_path, outcome)
            line = run_summary_line(row) if row else outcome_line(entry, outcome)
            bar.console.print(f"[{done}/{len(todo)}] rep {entry.repetition} {line}")
            if after_run is not None and outcome.run_id is not None and outcome.stored:
                after_run(outcome.run_id)
            if pause is not None and done < len(todo):  # run_plan pauses before every run but
                bar.console.print(pause)  # the first, on and off a terminal alike

        return run(plan, opts, on_start=on_start, on_finish=on_finish)
