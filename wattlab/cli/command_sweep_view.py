"""`wattlab sweep SPEC` for a spec with ``command:``: plan (with each run's argv), run, report.

The same output as a built-in sweep (the plan table, a progress bar, a line per run, ``--json``);
the plan's last column shows the command each run executes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from wattlab.errors import ConfigError
from wattlab.experiment.specs.command import CommandSweepSpec
from wattlab.monitor.carbon import CarbonSettings


def command_sweep(
    spec: CommandSweepSpec,
    *,
    db: str,
    dry_run: bool,
    json_path: str | None,
    slurm: bool,
    interval_s: float,
    carbon: CarbonSettings | None,
    powercap_root: str | None,
    cpu_tdp_w: float | None,
    ram_measure: str,
    cpu_load: str = "machine",
    after_run: Callable[[int], None] | None = None,
) -> None:
    from wattlab.cli.sweep_view import print_plan, run_with_progress
    from wattlab.experiment.db.store import check_writable_database, open_store
    from wattlab.experiment.result_json import sweep_results
    from wattlab.experiment.sweep.command_plan import CommandOptions, run_command_plan
    from wattlab.experiment.sweep.plan import make_plan
    from wattlab.jsonio import dump_json

    if slurm:
        raise ConfigError(
            f"sweep {spec.name!r} runs a command, which runs on this machine only; leave out "
            "--executor slurm."
        )
    spec.check_program()  # before the database is created
    if dry_run:  # writes nothing: no database is created, no sweep registered
        path = Path(db).expanduser()
        if path.is_file() and path.stat().st_size > 0:
            with open_store(path, readonly=True) as store:
                plan = make_plan(spec, store, register=False)
        else:
            plan = make_plan(spec, None, register=False)
    else:
        from wattlab.experiment.sweep.lock import check_lock_path

        check_lock_path(db, spec.name)  # before the database is created or opened
        check_writable_database(db)
        with open_store(db) as store:
            plan = make_plan(spec, store)
    data: dict[str, Any] = plan.to_dict()
    for run, entry in zip(data["runs"], plan.entries, strict=True):
        run["argv"] = entry.config.argv
    if json_path and dry_run:
        dump_json(data, json_path)
    if json_path != "-":
        print_plan(plan, dry_run=dry_run)
    if dry_run:
        return
    from wattlab import stop_signals

    stop_signals.at_stake(stop_signals.SWEEP_AT_STAKE)
    opts = CommandOptions(
        db_path=db,
        carbon=carbon,
        interval_s=interval_s,
        powercap_root=powercap_root,
        cpu_tdp_w=cpu_tdp_w,
        ram_measure=ram_measure,
        cpu_load=cpu_load,
    )
    outcomes = run_with_progress(plan, opts, after_run=after_run, run=run_command_plan)
    from wattlab.cli.render import written_after_work
    from wattlab.cli.sweep_view import failed_line

    json_ok = True
    if json_path:
        data["notes"] = plan.notes
        data["results"] = sweep_results(outcomes)
        json_ok = written_after_work(data, json_path, "the sweep's runs are stored")
    line = failed_line(outcomes, "their exit codes and stderr")
    if line is not None:
        print(line, file=sys.stderr)
        raise typer.Exit(1)
    if not json_ok:
        raise typer.Exit(1)
