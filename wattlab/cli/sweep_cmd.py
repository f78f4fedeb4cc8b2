"""`wattlab sweep SPEC`: plan a grid of runs from a YAML spec or a preset, print the plan, and
run it (locally in one warm worker, or as a SLURM job array); exit 1 when any run failed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from wattlab.cli.choices import Executor, choice_callback
from wattlab.cli.measurement import (
    CPU_LOAD,
    INTERVAL_S,
    RAM_MEASURE,
    MeasurementFlags,
    resolve_device,
)
from wattlab.cli.mlflow_log import log_to_mlflow
from wattlab.cli.options import (
    CarbonIntensity,
    CpuLoad,
    CpuTdp,
    DataDir,
    Db,
    IntensityRange,
    IntensityTrace,
    Interval,
    JsonOut,
    Mlflow,
    PowercapRoot,
    Pue,
    RamMeasure,
    Region,
    bounded,
)

if TYPE_CHECKING:
    from wattlab.experiment.executors.slurm import SlurmOptions


def sweep(
    ctx: typer.Context,
    spec: Annotated[
        str,
        typer.Argument(  # every name of specs.base.PRESETS (tests/cli/test_cli_sweep_help.py)
            help="A sweep YAML file or a preset: paper-12, quickstart, h200-1gpu, demo-gpu, "
            "demo-cpu."
        ),
    ],
    db: Db = "wattlab.db",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and stop (writes nothing).")
    ] = False,
    data_dir: DataDir = None,
    device: Annotated[
        Optional[str],
        typer.Option(
            "--device",
            help="Override the spec's device: cuda | cpu | auto (a GPU if there is one).",
        ),
    ] = None,
    # the measuring flags (cli.measurement.PARAMETERS), read through ctx.params
    interval: Interval = INTERVAL_S,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = RAM_MEASURE,
    cpu_load: CpuLoad = CPU_LOAD,
    json_path: JsonOut = None,
    region: Region = None,
    intensity_trace: IntensityTrace = None,
    mlflow: Mlflow = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue a stored sweep (the same as running it again)."),
    ] = False,
    # --- SLURM (--executor slurm); see docs/cluster.md ---
    executor: Annotated[
        str,
        typer.Option(
            help="Where runs execute: local | slurm (one job-array task per run).",
            callback=choice_callback("--executor", Executor),
        ),
    ] = "local",
    partition: Annotated[Optional[str], typer.Option(help="SLURM partition.")] = None,
    gpus_per_task: Annotated[
        Optional[int],
        typer.Option(
            help="SLURM GPUs per task (default: the runs' GPU count).",
            callback=bounded("--gpus-per-task", "gpus"),
        ),
    ] = None,
    cpus_per_task: Annotated[
        Optional[int],
        typer.Option(
            help="SLURM CPUs per task.", callback=bounded("--cpus-per-task", "cpus_per_task")
        ),
    ] = None,
    time_limit: Annotated[
        int,
        typer.Option(
            "--time-limit",
            help="SLURM time limit per task (min).",
            callback=bounded("--time-limit", "time_limit_min"),
        ),
    ] = 60,
    account: Annotated[Optional[str], typer.Option(help="SLURM account to charge.")] = None,
    sbatch_flag: Annotated[
        Optional[list[str]],
        typer.Option(help="Extra sbatch option, repeatable: --sbatch-flag=--qos=high."),
    ] = None,
    array_parallelism: Annotated[
        Optional[int],
        typer.Option(
            help="SLURM array tasks running at once (default: no limit).",
            callback=bounded("--array-parallelism", "array_parallelism"),
        ),
    ] = None,
    slurm_folder: Annotated[
        Optional[str],
        typer.Option(
            help="Shared folder for task results and logs (default: wattlab-slurm/ by --db)."
        ),
    ] = None,
    slurm_poll: Annotated[
        float,
        typer.Option(
            help="Seconds between looks at the SLURM queue.",
            callback=bounded("--slurm-poll", "slurm_poll_s"),
        ),
    ] = 5.0,
) -> None:
    """Run a grid of configurations with repetitions; resumable. One warm worker process runs
    the one-process runs one after another (each with its own model, seed and windows); a
    multi-GPU run gets torchrun's processes of its own. SPEC is a sweep YAML file or a preset:
    paper-12, quickstart, h200-1gpu, demo-gpu, demo-cpu."""
    from wattlab.cli.sweep_view import print_plan, run_with_progress
    from wattlab.experiment.db.store import check_writable_database, open_store
    from wattlab.experiment.result_json import sweep_result
    from wattlab.experiment.specs.load import load_sweep_spec
    from wattlab.experiment.specs.trainer import SweepSpec
    from wattlab.experiment.sweep.plan import MachineFacts, check_spec_inputs, make_plan
    from wattlab.jsonio import dump_json

    measuring = MeasurementFlags.from_params(ctx.params).settings(mlflow=mlflow)
    slurm = None
    if executor == Executor.slurm.value:
        slurm = slurm_options(
            db, slurm_folder, partition, gpus_per_task, cpus_per_task, time_limit, account,
            sbatch_flag or [], array_parallelism, slurm_poll,
        )  # fmt: skip
    after_run = (lambda run_id: log_to_mlflow(db, [run_id])) if mlflow else None
    if device == "auto":  # the demo: the GPU when there is one, else the CPU
        device = resolve_device(None)
    sweep_spec = load_sweep_spec(spec, data_dir=data_dir, device=device)
    if not isinstance(sweep_spec, SweepSpec):  # a sweep of the user's own command
        from wattlab.cli.command_sweep_view import command_sweep

        command_sweep(
            sweep_spec, db=db, dry_run=dry_run, json_path=json_path, slurm=slurm is not None,
            interval_s=measuring.interval_s, carbon=measuring.carbon,
            powercap_root=measuring.powercap_root_text, cpu_tdp_w=measuring.cpu_tdp_w,
            ram_measure=measuring.ram_measure, cpu_load=measuring.cpu_load,
            after_run=after_run,
        )  # fmt: skip
        return
    machine = MachineFacts.detect() if slurm is None else MachineFacts.cluster()
    if dry_run:  # writes nothing: no database is created, no sweep registered
        path = Path(db).expanduser()
        if path.is_file() and path.stat().st_size > 0:
            with open_store(path, readonly=True) as store:
                plan = make_plan(sweep_spec, store, machine, register=False)
        else:
            plan = make_plan(sweep_spec, None, machine, register=False)
    else:
        from wattlab.experiment.sweep.lock import check_lock_path

        check_lock_path(db, sweep_spec.name)
        check_spec_inputs(sweep_spec, machine)  # before the database is created or opened
        check_writable_database(db)
        with open_store(db) as store:
            plan = make_plan(sweep_spec, store, machine)
    if json_path and dry_run:
        dump_json(plan.to_dict(), json_path)
    if json_path != "-":
        print_plan(plan, dry_run=dry_run)
    if dry_run:
        return
    from wattlab import stop_signals

    stop_signals.at_stake(stop_signals.SWEEP_AT_STAKE)
    opts = measuring.worker_options(db, progress=False)
    if slurm is None:
        outcomes = run_with_progress(plan, opts, after_run=after_run)
    else:
        from wattlab.cli.slurm_view import run_on_slurm_with_lines

        outcomes = run_on_slurm_with_lines(plan, opts, slurm)
        if mlflow:
            log_to_mlflow(db, [o.run_id for _, o in outcomes if o.status == "ok" and o.run_id])
    from wattlab.cli.render import written_after_work
    from wattlab.cli.sweep_view import failed_line

    json_ok = not json_path or written_after_work(
        sweep_result(plan, outcomes), json_path, "the sweep's runs are stored"
    )
    line = failed_line(outcomes, "their errors")
    if line is not None:
        print(line, file=sys.stderr)
        raise typer.Exit(1)
    if not json_ok:
        raise typer.Exit(1)


def slurm_options(
    db: str,
    folder: str | None,
    partition: str | None,
    gpus_per_task: int | None,
    cpus_per_task: int | None,
    time_limit_min: int,
    account: str | None,
    sbatch_flags: list[str],
    array_parallelism: int | None,
    poll_s: float,
) -> SlurmOptions:
    """The validated SlurmOptions of `wattlab sweep --executor slurm`."""
    from wattlab.experiment.executors.slurm import SlurmOptions, check_slurm_here

    slurm = SlurmOptions(
        folder=Path(folder) if folder else Path(db).expanduser().resolve().parent / "wattlab-slurm",
        partition=partition,
        gpus_per_task=gpus_per_task,
        cpus_per_task=cpus_per_task,
        time_limit_min=time_limit_min,
        account=account,
        sbatch_flags=list(sbatch_flags),
        array_parallelism=array_parallelism,
        poll_s=poll_s,
    )
    slurm.validate()
    check_slurm_here()
    return slurm
