"""The `wattlab` command line: parse, call one function, print. No logic a test would want.

Options are the ``Annotated`` aliases of ``wattlab.cli.options``, which check numbers and output
paths while the command line is parsed. Bad input raises a WattlabError (or is a usage error);
``main`` prints one line and exits with code 2. docs/errors.md has the whole contract.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from wattlab.cli.options import (
    BaselineW,
    BatchSize,
    BudgetSamples,
    CarbonIntensity,
    CpuTdp,
    CsvTraceOut,
    DataDir,
    Db,
    DurationS,
    EpochEvalSamples,
    Epochs,
    EstimateBatchSize,
    EstimateEpochs,
    EstimateGpus,
    EstimatePowerLimit,
    EvaluationDir,
    ExportDir,
    Gpus,
    GpuTdp,
    IdleBaseline,
    ImageSize,
    IntensityRange,
    IntensityTrace,
    Interval,
    JsonOut,
    LearningRate,
    MaxPenalty,
    MinSaving,
    Mlflow,
    Model,
    ModelFactory,
    Nnodes,
    NodeRank,
    Nproc,
    PowercapRoot,
    PowerLimit,
    PowerLimitFraction,
    Precision,
    ProjectAfter,
    ProjectAfterEpochs,
    ProjectAfterFraction,
    PrometheusPort,
    Pue,
    RamMeasure,
    Recipe,
    Region,
    ReportDir,
    Seed,
    Stem,
    SweepName,
    SyntheticVersion,
    TargetAccuracy,
    TestSamples,
    TrainSamples,
    TrainSize,
    WarmupSteps,
    bounded,
    endpoint_option,
    project_after_settings,
)
from wattlab.errors import Interrupted, WattlabError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Measure, compare and predict the energy, time and CO2e of deep-learning training.",
)


# --- shared checks -----------------------------------------------------------------------
def _powercap_root(value: str | None) -> Path | None:
    """--powercap-root, else $WATTLAB_POWERCAP_ROOT; empty counts as unset (never the cwd)."""
    root = value or os.environ.get("WATTLAB_POWERCAP_ROOT") or None
    if root is None:
        return None
    path = Path(root)
    if not path.is_dir():
        raise WattlabError(f"the powercap root {root} does not exist or is not a folder.")
    return path


def _measurement_settings(
    carbon_intensity: float | None,
    intensity_range: str | None,
    pue: float | None,
    powercap_root: str | None,
    region: str | None = None,
    intensity_trace: str | None = None,
    mlflow: bool = False,
):
    """Check the flags every measuring command shares; return (CarbonSettings, powercap root).
    (--interval and the output paths were checked while parsing.)"""
    from wattlab.monitor.carbon import settings_from_flags

    carbon = settings_from_flags(carbon_intensity, intensity_range, pue, region, intensity_trace)
    if carbon.trace is not None:  # a live measurement: the trace must cover the present
        carbon.trace.check_covers_now()
    if mlflow:  # say which extra is missing before anything runs
        from wattlab.integrations.mlflow import _mlflow, check_tracking_uri

        _mlflow()
        check_tracking_uri()  # a closed port or a missing folder: one sentence, now
    return carbon, _powercap_root(powercap_root)


def _log_to_mlflow(db: str, run_ids: list[int]) -> None:
    """`--mlflow` on run/sweep: export these stored runs ($MLFLOW_TRACKING_URI, experiment
    $MLFLOW_EXPERIMENT_NAME or "wattlab")."""
    from wattlab.integrations.mlflow import DEFAULT_EXPERIMENT, export_store

    if not run_ids:
        return
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
    try:
        exported = export_store(db, run_ids=run_ids, experiment=experiment)
    except Exception as error:  # the run is safe in the database; MLflow can catch up later
        print(
            f"wattlab: warning: run(s) {run_ids} not logged to MLflow ({error}); they are in "
            f"{db}: `wattlab export --mlflow --db {db}` adds them later.",
            file=sys.stderr,
        )
        return
    for run_id, mlflow_id in exported:
        print(f"mlflow: wattlab run {run_id} -> {mlflow_id}", file=sys.stderr)


def _console():
    from wattlab.cli.render import make_console

    return make_console()


# --- devices -----------------------------------------------------------------------------
@app.command()
def devices(
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = "system",
    json_path: JsonOut = None,
) -> None:
    """List every meter found, its provenance, and for anything missing why and how to fix it."""
    from wattlab.jsonio import dump_json
    from wattlab.meters.discover import describe_discovery, discover_meters

    discovery = discover_meters(
        powercap_root=_powercap_root(powercap_root), cpu_tdp_w=cpu_tdp, ram_measure=ram_measure
    )
    try:
        rows = describe_discovery(discovery)
    finally:
        discovery.close()
    if json_path:
        dump_json({"meters": rows}, json_path)
        if json_path == "-":
            return
    from rich.table import Table

    table = Table(title="wattlab meters on this machine")
    for col in ("component", "source", "provenance", "description"):
        table.add_column(col)
    problems = []
    for row in rows:
        if row.get("reason"):
            problems.append(row)
            continue
        table.add_row(
            str(row.get("component", "")),
            str(row.get("source", "")),
            str(row.get("provenance", "")),
            str(row.get("description", "")),
        )
    console = _console()
    console.print(table)
    for row in problems:
        console.print(f"[bold]missing: {row.get('component')}[/bold] — {row.get('reason')}")
        console.print(f"  fix: {row.get('fix')}")
        console.print(f"  instead: {row.get('fallback')}")


# --- monitor -----------------------------------------------------------------------------
@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def monitor(
    ctx: typer.Context,
    interval: Interval = 0.1,
    json_path: JsonOut = None,
    csv_trace: CsvTraceOut = None,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = "system",
    idle_s: IdleBaseline = 0.0,
    region: Region = None,
    intensity_trace: IntensityTrace = None,
    prometheus_port: PrometheusPort = None,
) -> None:
    """Run CMD (after --) and report its energy: `wattlab monitor -- python train.py`."""
    from wattlab.cli.watch import monitor_command
    from wattlab.errors import echo
    from wattlab.monitor.carbon import settings_from_flags

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise WattlabError(
            "give the command to measure after --, e.g. wattlab monitor -- python train.py."
        )
    if command[0].startswith("-") and command[0] != "-":
        raise WattlabError(
            f"unknown option {echo(command[0])}; put the command to measure after --."
        )
    if csv_trace == "-":
        raise WattlabError("--csv-trace needs a file name; '-' (stdout) is for --json only.")
    carbon = settings_from_flags(carbon_intensity, intensity_range, pue, region, intensity_trace)
    if carbon.trace is not None:  # checked before the command starts, not after it ran
        carbon.trace.check_covers_now()
    code = monitor_command(
        command,
        interval_s=interval,
        carbon=carbon,
        json_path=json_path,
        csv_trace=csv_trace,
        powercap_root=_powercap_root(powercap_root),
        cpu_tdp_w=cpu_tdp,
        ram_measure=ram_measure,
        idle_s=idle_s,
        prometheus_port=prometheus_port,
    )
    raise typer.Exit(code)


def _resolve_device(device: str | None) -> str:
    if device not in (None, "auto"):
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


# --- run ---------------------------------------------------------------------------------
@app.command()
def run(
    model: Model = None,
    model_factory: ModelFactory = None,
    stem: Stem = "cifar",
    image_size: ImageSize = 32,
    dataset: Annotated[
        str, typer.Option("--dataset", help="synthetic (offline default) | cifar10")
    ] = "synthetic",
    synthetic_version: SyntheticVersion = 2,
    recipe: Recipe = 2,
    epoch_eval_samples: EpochEvalSamples = 1024,
    data_dir: DataDir = None,
    train_samples: TrainSamples = None,
    test_samples: TestSamples = None,
    precision: Precision = "fp32",
    compile_model: Annotated[
        bool, typer.Option("--compile", help="torch.compile the model.")
    ] = False,
    cuda_graphs: Annotated[
        bool,
        typer.Option(
            "--cuda-graphs", help="Replay each step as a CUDA graph (one GPU; not amp-fp16)."
        ),
    ] = False,
    epochs: Epochs = None,
    budget_samples: BudgetSamples = None,
    batch_size: BatchSize = 256,
    lr: LearningRate = None,
    seed: Seed = 0,
    warmup_steps: WarmupSteps = None,
    device: Annotated[
        str | None, typer.Option("--device", help="cuda | cpu (default: cuda if present).")
    ] = None,
    gpus: Gpus = 1,
    nproc: Nproc = 1,
    nnodes: Nnodes = 1,
    node_rank: NodeRank = 0,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(
            "--rdzv-endpoint", help="HOST:PORT rendezvous (torchrun).", callback=endpoint_option
        ),
    ] = None,
    power_limit: PowerLimit = None,
    power_limit_fraction: PowerLimitFraction = None,
    codecarbon: Annotated[
        bool,
        typer.Option("--codecarbon/--no-codecarbon", help="Also run CodeCarbon's offline tracker."),
    ] = False,
    codecarbon_country: Annotated[
        str, typer.Option("--codecarbon-country", help="ISO code for CodeCarbon's offline mode.")
    ] = "USA",
    project_after_epochs: ProjectAfterEpochs = None,
    project_after_fraction: ProjectAfterFraction = None,
    project_after: ProjectAfter = None,
    db: Db = "wattlab.db",
    interval: Interval = 0.1,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = "system",
    json_path: JsonOut = None,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
    ] = True,
    region: Region = None,
    intensity_trace: IntensityTrace = None,
    mlflow: Mlflow = False,
) -> None:
    """Train one configuration under the energy monitor and store it in the database."""
    from wattlab.experiment.runner import run as run_config
    from wattlab.experiment.worker import WorkerOptions
    from wattlab.jsonio import dump_json
    from wattlab.train.config import make_run_config

    carbon, root = _measurement_settings(
        carbon_intensity, intensity_range, pue, powercap_root, region, intensity_trace, mlflow
    )
    if node_rank >= nnodes:
        raise WattlabError(f"--node-rank must be below --nnodes {nnodes}, got {node_rank}.")
    cfg = make_run_config(
        model=model,
        model_factory=model_factory,
        stem=stem,
        image_size=image_size,
        dataset=dataset,
        synthetic_version=synthetic_version,
        recipe=recipe,
        epoch_eval_samples=epoch_eval_samples,
        data_dir=data_dir,
        train_samples=train_samples,
        test_samples=test_samples,
        precision=precision,
        compile=compile_model,
        cuda_graphs=cuda_graphs,
        epochs=epochs,
        budget_samples=budget_samples,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        warmup_steps=warmup_steps,
        device=_resolve_device(device),
        gpus=gpus,
        nproc=nproc,
        power_limit_w=power_limit,
        power_limit_fraction=power_limit_fraction,
        codecarbon=codecarbon,
        **project_after_settings(project_after, project_after_epochs, project_after_fraction),
    )
    opts = WorkerOptions(
        db_path=db,
        carbon=carbon,
        interval_s=interval,
        powercap_root=str(root) if root else None,
        cpu_tdp_w=cpu_tdp,
        ram_measure=ram_measure,
        progress=progress and json_path != "-",
        codecarbon_country=codecarbon_country,
    )
    outcome = run_config(cfg, opts, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint)
    if mlflow and outcome.run_id is not None and outcome.stored:
        _log_to_mlflow(db, [outcome.run_id])
    if json_path and outcome.row is not None:
        dump_json({**outcome.row, "intensity_source": carbon.source}, json_path)
    if outcome.status == "ok" and outcome.row is not None and opts.progress:
        from wattlab.cli.render import print_run_row

        print_run_row(outcome.row)
    if outcome.status == "ok" and json_path != "-":
        print(f"CO2e at {carbon.describe()}")
    if outcome.status != "ok":
        if outcome.run_id is not None and outcome.stored:
            said = f"the run failed and was stored as failed (run {outcome.run_id})"
        else:
            said = "the run failed and nothing was stored"
        print(f"wattlab: {said}: {outcome.error}", file=sys.stderr)
        raise typer.Exit(1)


# --- sweep -------------------------------------------------------------------------------
@app.command()
def sweep(
    spec: Annotated[
        str,
        typer.Argument(help="A sweep YAML file or a preset: paper-12, quickstart, h200-1gpu."),
    ],
    db: Db = "wattlab.db",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and stop (writes nothing).")
    ] = False,
    data_dir: DataDir = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            help="Override the spec's device: cuda | cpu | auto (a GPU if there is one).",
        ),
    ] = None,
    interval: Interval = 0.1,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    powercap_root: PowercapRoot = None,
    cpu_tdp: CpuTdp = None,
    ram_measure: RamMeasure = "system",
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
        str, typer.Option(help="Where runs execute: local | slurm (one job-array task per run).")
    ] = "local",
    partition: Annotated[str | None, typer.Option(help="SLURM partition.")] = None,
    gpus_per_task: Annotated[
        int | None,
        typer.Option(
            help="SLURM GPUs per task (default: the runs' GPU count).",
            callback=bounded("--gpus-per-task", "gpus"),
        ),
    ] = None,
    cpus_per_task: Annotated[
        int | None,
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
    account: Annotated[str | None, typer.Option(help="SLURM account to charge.")] = None,
    sbatch_flag: Annotated[
        list[str] | None,
        typer.Option(help="Extra sbatch option, repeatable: --sbatch-flag=--qos=high."),
    ] = None,
    array_parallelism: Annotated[
        int | None,
        typer.Option(
            help="SLURM array tasks running at once (default: no limit).",
            callback=bounded("--array-parallelism", "array_parallelism"),
        ),
    ] = None,
    slurm_folder: Annotated[
        str | None,
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
    """Run a grid of configurations with repetitions; resumable; each run in its own process."""
    from wattlab.cli.sweep_view import print_plan, run_with_progress
    from wattlab.experiment.spec import SweepSpec, load_sweep_spec
    from wattlab.experiment.store import check_writable_database, open_store
    from wattlab.experiment.sweep import MachineFacts, check_spec_inputs, make_plan
    from wattlab.experiment.worker import WorkerOptions
    from wattlab.jsonio import dump_json

    carbon, root = _measurement_settings(
        carbon_intensity, intensity_range, pue, powercap_root, region, intensity_trace, mlflow
    )
    from wattlab.experiment.executors import EXECUTORS

    if executor not in EXECUTORS:
        raise WattlabError(f"--executor {executor!r} is unknown; allowed: {', '.join(EXECUTORS)}.")
    slurm = None
    if executor == "slurm":
        slurm = _slurm_options(
            db, slurm_folder, partition, gpus_per_task, cpus_per_task, time_limit, account,
            sbatch_flag or [], array_parallelism, slurm_poll,
        )  # fmt: skip
    if device == "auto":  # the demo: the GPU when there is one, else the CPU
        device = _resolve_device(None)
    sweep_spec = load_sweep_spec(spec, data_dir=data_dir, device=device)
    if not isinstance(sweep_spec, SweepSpec):  # a sweep of the user's own command
        from wattlab.cli.command_sweep_view import command_sweep

        command_sweep(
            sweep_spec, db=db, dry_run=dry_run, json_path=json_path, slurm=slurm is not None,
            interval_s=interval, carbon=carbon, powercap_root=str(root) if root else None,
            cpu_tdp_w=cpu_tdp, ram_measure=ram_measure,
            after_run=(lambda run_id: _log_to_mlflow(db, [run_id])) if mlflow else None,
        )  # fmt: skip
        return
    machine = MachineFacts.detect() if slurm is None else _cluster_machine()
    if dry_run:  # writes nothing: no database is created, no sweep registered
        path = Path(db).expanduser()
        if path.is_file() and path.stat().st_size > 0:
            with open_store(path, readonly=True) as store:
                plan = make_plan(sweep_spec, store, machine, register=False)
        else:
            plan = make_plan(sweep_spec, None, machine, register=False)
    else:
        from wattlab.experiment.sweep_lock import check_lock_path

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
    opts = WorkerOptions(
        db_path=db,
        carbon=carbon,
        interval_s=interval,
        powercap_root=str(root) if root else None,
        cpu_tdp_w=cpu_tdp,
        ram_measure=ram_measure,
        progress=False,
    )
    after_run = (lambda run_id: _log_to_mlflow(db, [run_id])) if mlflow else None
    if slurm is None:
        outcomes = run_with_progress(plan, opts, after_run=after_run)
    else:
        from wattlab.cli.slurm_view import run_on_slurm_with_lines

        outcomes = run_on_slurm_with_lines(plan, opts, slurm)
        if mlflow:
            _log_to_mlflow(db, [o.run_id for _, o in outcomes if o.status == "ok" and o.run_id])
    if json_path:
        data = plan.to_dict()
        data["results"] = [
            {
                "order": e.order,
                "label": e.label,
                "repetition": e.repetition,
                "run_id": o.run_id,
                "status": o.status,
                "error": o.error,
            }
            for e, o in outcomes
        ]
        dump_json(data, json_path)
    failed = [o for _, o in outcomes if o.status != "ok"]
    if failed:
        print(
            f"wattlab: {len(failed)} of {len(outcomes)} runs failed (stored with their "
            "errors; run the sweep again to retry them).",
            file=sys.stderr,
        )
        raise typer.Exit(1)


def _slurm_options(
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
) -> Any:
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


def _cluster_machine() -> Any:
    """What the cluster's nodes offer, as far as planning goes: GPUs are SLURM's business
    (a task asks for them), power limits are not set on shared cluster nodes."""
    from wattlab.experiment.sweep import MachineFacts

    return MachineFacts(
        cuda_gpus=1 << 16,
        can_set_power_limits=False,
        power_limit_reason="not set on SLURM nodes by wattlab",
    )


# --- report ------------------------------------------------------------------------------
@app.command()
def report(
    db: Db = "wattlab.db",
    sweep_name: Annotated[
        str | None, typer.Option("--sweep", help="Report one sweep's runs.")
    ] = None,
    out: ReportDir = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Reference configuration, KEY=VALUE,... (e.g. gpus=1,precision=fp32).",
        ),
    ] = None,
    min_saving: MinSaving = 0.03,
    max_penalty: MaxPenalty = 0.02,
    import_profile: Annotated[
        str | None,
        typer.Option(
            "--import-profile",
            help="Analyse a Zeus-style power-limit profile CSV instead of the database.",
        ),
    ] = None,
    baseline_w: BaselineW = None,
    json_path: JsonOut = None,
    target_accuracy: TargetAccuracy = None,
    pareto_axes: Annotated[
        str | None,
        typer.Option(
            "--pareto-axes",
            help="The Pareto front's axes: energy,time (default) or energy,time,accuracy; "
            "with accuracy the finding names the compared configurations' accuracies.",
        ),
    ] = None,
) -> None:
    """Tables, figures and the operating region: report.md and a self-contained report.html."""
    from wattlab.analysis.tradeoffs import parse_pareto_axes
    from wattlab.jsonio import dump_json, output_folder

    axes = parse_pareto_axes(pareto_axes)

    if out is None and json_path is None:
        raise WattlabError("give --out DIR for the report, or --json PATH for the summary.")
    if import_profile is not None:
        from wattlab.analysis.profile_report import write_profile_report
        from wattlab.analysis.profiles import analyze_profile, load_zeus_profile

        profile = load_zeus_profile(import_profile)
        analysis = analyze_profile(profile, min_saving, max_penalty, baseline_w)
        if out is not None:
            with output_folder(out):  # removed again if writing fails
                paths = write_profile_report(profile, analysis, out)
            print(f"report: {paths.html}")
        if json_path:
            dump_json(analysis, json_path)
        elif out is not None:
            _print_profile(analysis)
        return
    from wattlab.analysis.report import analyze_runs, write_report
    from wattlab.experiment.store import open_store

    if not Path(db).exists():
        raise WattlabError(f"no database at {db}; run `wattlab run` or `wattlab sweep` first.")
    with open_store(db, readonly=True) as store:
        runs = store.runs(sweep=sweep_name)
        windows = store.windows()
        trace = store.trace()
        scheduler_jobs = store.scheduler_jobs()
        spec = store.sweep_spec(sweep_name) if sweep_name is not None else None
    if sweep_name is not None and len(runs) == 0:
        raise WattlabError(f"the database {db} holds no runs of sweep {sweep_name!r}.")
    if out is not None:
        with output_folder(out):  # created only now, and removed again if writing fails
            paths = write_report(
                runs,
                windows,
                trace,
                out,
                sweep=sweep_name,
                baseline=baseline,
                min_saving=min_saving,
                max_penalty=max_penalty,
                scheduler_jobs=scheduler_jobs,
                spec=spec,
                target_accuracy=target_accuracy,
                pareto_axes=axes,
            )
        summary = json.loads(Path(paths.summary_json).read_text())
        if json_path != "-":
            print(f"report: {paths.html}\n        {paths.markdown}")
    else:
        _, summary = analyze_runs(
            runs,
            sweep=sweep_name,
            baseline=baseline,
            min_saving=min_saving,
            max_penalty=max_penalty,
            spec=spec,
            windows=windows,
            target_accuracy=target_accuracy,
            pareto_axes=axes,
        )
    if json_path:
        dump_json(summary, json_path)
    if json_path != "-":
        _print_summary(summary)


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    from wattlab.cli.render import fmt_co2e, fmt_energy

    table = Table(title=f"{summary.get('sweep') or 'all runs'}: per configuration (medians)")
    for col in (
        "configuration",
        "n",
        "time s",
        "energy",
        "Δtime",
        "Δenergy",
        "CO2e [range]",
        "provenance",
        "pareto",
        "region",
    ):
        table.add_column(col)
    for c in summary.get("configurations", []):
        table.add_row(
            str(c["label"]) + (" (baseline)" if c.get("is_baseline") else ""),
            str(c["n"]),
            f"{c['time_s']:.1f}",
            fmt_energy(c["energy_j"]),
            f"{c['time_change']:+.1%}" if c.get("time_change") is not None else "",
            f"{c['energy_change']:+.1%}" if c.get("energy_change") is not None else "",
            f"{fmt_co2e(c['co2e_kg'])} [{fmt_co2e(c['co2e_low_kg'])}–"
            f"{fmt_co2e(c['co2e_high_kg'])}]",
            str(c.get("provenance")),
            "★" if c.get("pareto") else "",
            "✓" if c.get("operating_region") else "",
        )
    from wattlab.cli.render import make_console

    make_console().print(table)
    if summary.get("budget_windows"):  # runs of a command sweep: what their window holds
        print(summary["budget_windows"]["sentence"])


def _print_profile(analysis: dict) -> None:
    print(
        f"baseline {analysis['baseline_w']:g} W; pareto {analysis['pareto']}; "
        f"operating region {analysis['operating_region']}"
    )
    for lim in analysis["limits"]:
        print(
            f"  {lim['power_limit_w']:>5g} W  time {lim['time_s']:.2f} s "
            f"({lim['time_change']:+.2%})  energy {lim['energy_j']:.0f} J "
            f"({lim['energy_change']:+.2%})"
        )


# --- estimate ----------------------------------------------------------------------------
estimate_app = typer.Typer(
    invoke_without_command=True,
    help="Predict a configuration's energy, time and CO2e before training; evaluate methods.",
)
app.add_typer(estimate_app, name="estimate")


def _estimate_runs(db: str | None, data: str | None):
    """Measured runs for PRE: a database, a reference CSV, or the shipped H200 reference."""
    if db is not None and data is not None:
        raise WattlabError("give --db or --data, not both.")
    if db is not None:
        from wattlab.experiment.store import open_store

        if not Path(db).exists():
            raise WattlabError(f"no database at {db}.")
        with open_store(db, readonly=True) as store:
            return store.runs(status="ok"), store.windows()
    from wattlab.estimate.reference import load_default_reference, load_reference_csv

    if data is not None:
        return load_reference_csv(data)
    return load_default_reference()


def _pre_fit(db: str | None, data: str | None):
    """PRE's fit for ``estimate`` (kept on disk by ``wattlab.estimate.pre_cache``), done only
    once the configuration is checked; and a note when the shipped reference is missing."""
    from wattlab.errors import DataError
    from wattlab.estimate import pre_cache
    from wattlab.estimate.reference import default_reference_path, load_default_reference

    if db is not None:
        runs_df, _ = _estimate_runs(db, data)
        return (lambda: pre_cache.fit_runs(runs_df)), None
    if data is None and not default_reference_path().is_file():
        try:
            load_default_reference()
        except DataError as error:
            return None, str(error)
    return (lambda: pre_cache.fit_reference(data)), None


@estimate_app.callback()
def estimate(
    ctx: typer.Context,
    model: Model = None,
    model_factory: ModelFactory = None,
    stem: Annotated[str, typer.Option("--stem", help="cifar | imagenet (ResNets).")] = "cifar",
    image_size: ImageSize = 32,
    gpus: EstimateGpus = 1,
    precision: Precision = "fp32",
    epochs: EstimateEpochs = None,
    batch_size: EstimateBatchSize = 256,
    train_size: TrainSize = 50_000,
    gpu_name: Annotated[
        str | None, typer.Option("--gpu-name", help='GPU name, e.g. "NVIDIA H200".')
    ] = None,
    gpu_tdp: GpuTdp = None,
    power_limit: EstimatePowerLimit = None,
    duration_s: DurationS = None,
    db: Annotated[str | None, typer.Option("--db", help="Fit PRE on this database's runs.")] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Fit PRE on this reference CSV.")
    ] = None,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    json_path: JsonOut = None,
) -> None:
    """wattlab estimate --model resnet50 --gpus 2 --precision amp-bf16 --epochs 30
    --gpu-name "NVIDIA H200": every method's prediction side by side."""
    if ctx.invoked_subcommand is not None:
        return
    from wattlab.estimate.predict import estimate_all, format_estimates
    from wattlab.jsonio import dump_json
    from wattlab.monitor.carbon import settings_from_flags

    if (model is None and model_factory is None) or epochs is None:
        raise WattlabError(
            "give at least --model NAME (or --model-factory FILE.py:FUNC) and --epochs N "
            "(see --help)."
        )
    carbon = settings_from_flags(carbon_intensity, intensity_range, pue)
    pre_fit, pre_note = _pre_fit(db, data)
    estimates = estimate_all(
        model=model,
        model_factory=model_factory,
        image_size=image_size,
        gpus=gpus,
        precision=precision,
        epochs=epochs,
        gpu_name=gpu_name,
        batch_size=batch_size,
        stem=stem,
        train_size=train_size,
        power_limit_w=power_limit,
        duration_s=duration_s,
        gpu_tdp_w=gpu_tdp,
        pre_fit=pre_fit,
        carbon=carbon,
    )
    if json_path:
        dump_json(
            {"methods": {e.method: e.to_dict() for e in estimates}, "carbon": carbon.to_dict()},
            json_path,
        )
    if json_path != "-":
        print(format_estimates(estimates))
        print(f"CO2e at {carbon.describe()}")
        if pre_note:
            print(f"note: {pre_note}")


@estimate_app.command("evaluate")
def estimate_evaluate(
    db: Annotated[
        str | None, typer.Option("--db", help="Evaluate on this database's runs.")
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Evaluate on this reference CSV.")
    ] = None,
    out: EvaluationDir = None,
    target: Annotated[
        str,
        typer.Option(
            "--target", help="Energy every method predicts and is scored on: total | paper | gpu."
        ),
    ] = "total",
    protocol: Annotated[
        str,
        typer.Option(
            "--protocol",
            help="PRE's held-out group: loco | lomo | lopo | lofo | all "
            "(configuration/model/precision/architecture family).",
        ),
    ] = "all",
    step_method: Annotated[
        str,
        typer.Option(
            "--step-method",
            help="STEP rule: wattlab (epochs) | paper (FLUSS, s and w as published) | marks "
            "(step-level, the live rule, with a held-out calibrated interval) | both (all).",
        ),
    ] = "wattlab",
    step_start: Annotated[
        str,
        typer.Option(
            "--step-start",
            help="Published STEP's first window epoch s, or 'fluss' (from the power trace).",
        ),
    ] = "10",
    step_window: Annotated[
        int,
        typer.Option(
            "--step-window",
            help="Published STEP's window w, in epochs.",
            callback=bounded("--step-window", "epochs"),
        ),
    ] = 5,
    json_path: JsonOut = None,
) -> None:
    """RMSE, MAPE, bias and interval coverage of every method on the same runs and target,
    under each protocol."""
    from wattlab.errors import echo
    from wattlab.estimate.evaluate import (
        PROTOCOLS,
        STEP_METHODS,
        TARGETS,
        evaluate_methods,
        evaluation_markdown,
        write_evaluation,
    )
    from wattlab.jsonio import dump_json, output_folder

    if target not in TARGETS:
        raise WattlabError(f"--target must be one of {', '.join(TARGETS)}, got {echo(target)}.")
    if protocol != "all" and protocol not in PROTOCOLS:
        raise WattlabError(
            f"--protocol must be one of {', '.join(PROTOCOLS)} or all, got {echo(protocol)}."
        )
    if step_method not in STEP_METHODS:
        raise WattlabError(
            f"--step-method must be one of {', '.join(STEP_METHODS)}, got {echo(step_method)}."
        )
    if step_start == "fluss":
        stable_epoch = None
    elif step_start.isdigit() and 1 <= int(step_start) <= 100_000:
        stable_epoch = int(step_start)
    else:
        raise WattlabError(
            f"--step-start must be an epoch number >= 1 or fluss, got {echo(step_start)}."
        )
    runs_df, windows_df = _estimate_runs(db, data)
    traces_df = None
    if db is not None and step_method != "wattlab":
        from wattlab.experiment.store import open_store

        with open_store(db, create=False) as store:
            traces_df = store.trace()
    result = evaluate_methods(
        runs_df,
        windows_df,
        traces_df=traces_df,
        target=target,
        protocols=protocol,
        step_method=step_method,
        paper_stable_epoch=stable_epoch,
        paper_window_epochs=step_window,
    )
    if out is not None:
        with output_folder(out):
            paths = write_evaluation(result, out)
        if json_path != "-":
            print(f"evaluation: {paths['markdown']}")
    if json_path:
        dump_json(result.to_dict(), json_path)
    if json_path != "-":
        print(evaluation_markdown(result))


@estimate_app.command("power-limits")
def estimate_power_limits(
    db: Annotated[
        str | None, typer.Option("--db", help="SQLite results database with the run.")
    ] = None,
    run_id: Annotated[
        int | None,
        typer.Option(
            "--run", help="Id of an uncapped run in --db.", callback=bounded("--run", "run_id")
        ),
    ] = None,
    limits: Annotated[
        str | None,
        typer.Option(
            "--limits", help="Comma-separated limits in W per GPU (default: 100 % to 30 % of TDP)."
        ),
    ] = None,
    min_saving: Annotated[
        float,
        typer.Option(
            "--min-saving",
            help="Operating region: at least this share of energy saved (0.03).",
            callback=bounded("--min-saving", "min_saving"),
        ),
    ] = 0.03,
    max_slowdown: Annotated[
        float,
        typer.Option(
            "--max-slowdown",
            help="Operating region: at most this much more time (0.02).",
            callback=bounded("--max-slowdown", "max_penalty"),
        ),
    ] = 0.02,
    profiles: Annotated[
        str | None,
        typer.Option(
            "--profiles",
            help="Instead: evaluate on a folder of Zeus power-limit profiles (leave one out).",
        ),
    ] = None,
    json_path: JsonOut = None,
) -> None:
    """Predict a run's energy and time under GPU power limits without capping anything."""
    from wattlab.estimate import power_caps
    from wattlab.jsonio import dump_json

    if profiles is not None:
        evaluation = power_caps.evaluate_profiles(
            power_caps.read_profiles(profiles), min_saving=min_saving, max_slowdown=max_slowdown
        )
        if json_path:
            dump_json(evaluation.to_dict(), json_path)
        if json_path != "-":
            print(power_caps.evaluation_markdown(evaluation))
        return
    if db is None or run_id is None:
        raise WattlabError("give --db FILE and --run ID (or --profiles FOLDER).")
    limit_list = None
    if limits is not None:
        try:
            limit_list = [float(x) for x in limits.split(",") if x.strip()]
        except ValueError:
            raise WattlabError(
                f"--limits must be numbers in W separated by commas, got {limits!r}."
            ) from None
        if not limit_list or any(not x > 0 for x in limit_list):
            raise WattlabError(f"--limits must be positive numbers of W, got {limits!r}.")
    if not Path(db).exists():
        raise WattlabError(f"no database at {db}.")
    from wattlab.experiment.store import open_store

    with open_store(db, create=False) as store:
        runs = store.runs()
        windows = store.windows([run_id])
        trace = store.trace([run_id])
    run = power_caps.run_from_store(runs, windows, trace, run_id)
    curve = power_caps.predict_curve(
        run, limit_list, min_saving=min_saving, max_slowdown=max_slowdown
    )
    if json_path:
        dump_json({"run_id": run_id, **curve.to_dict()}, json_path)
    if json_path != "-":
        from wattlab.cli.render import print_power_limit_curve

        print_power_limit_curve(run_id, curve)


# --- export ------------------------------------------------------------------------------
@app.command()
def export(
    out: ExportDir = None,
    db: Db = "wattlab.db",
    fmt: Annotated[str, typer.Option("--format", help="csv | parquet | json")] = "csv",
    sweep_name: SweepName = None,
    mlflow: Annotated[
        bool, typer.Option("--mlflow", help="Export each run as an MLflow run.")
    ] = False,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri",
            help="MLflow store, e.g. sqlite:///mlflow.db ($MLFLOW_TRACKING_URI).",
        ),
    ] = None,
    experiment: Annotated[
        str, typer.Option("--experiment", help="MLflow experiment name.")
    ] = "wattlab",
) -> None:
    """Write the runs, windows, trace and sweeps tables as files for pandas users, and/or
    turn each stored run into an MLflow run (--mlflow)."""
    from wattlab.experiment.export import export_tables
    from wattlab.experiment.store import open_store
    from wattlab.jsonio import output_folder

    if out is None and not mlflow:
        raise WattlabError("give --out DIR for the table files, or --mlflow, or both.")
    if not mlflow and (tracking_uri is not None or experiment != "wattlab"):
        raise WattlabError("--tracking-uri and --experiment need --mlflow.")
    if mlflow:
        from wattlab.integrations.mlflow import export_store

        exported = export_store(
            db, tracking_uri=tracking_uri, experiment=experiment, sweep=sweep_name
        )
        new = [(r, m) for r, m in exported if m is not None]
        for run_id, mlflow_id in new:
            print(f"mlflow: wattlab run {run_id} -> {mlflow_id}")
        print(
            f"mlflow: {len(new)} run(s) exported to experiment {experiment!r}, "
            f"{len(exported) - len(new)} already there."
        )
    if out is None:
        return
    with open_store(db, readonly=True) as store, output_folder(out):
        paths = export_tables(store, out, fmt, sweep=sweep_name)
    for path in paths:
        print(path)


power_app = typer.Typer(help="GPU power-limit journal.", no_args_is_help=True)
app.add_typer(power_app, name="power")


@power_app.command("restore")
def power_restore() -> None:
    """Put back the GPU power limits a killed run left behind (from the journal)."""
    from wattlab.experiment.runner import restore_pending_limits
    from wattlab.power_limits import default_journal_path

    restored = restore_pending_limits()
    if not restored:
        print("nothing to restore: no power-limit journal was left behind.")
    for entry in restored:
        print(f"restored {entry}")
    left = [str(e["uuid"]) for e in restored if e.get("status") == "gpu not found"]
    if left:
        print(
            f"wattlab: the journal {default_journal_path()} is kept with the {len(left)} "
            f"GPU limit(s) that could not be put back here ({', '.join(left)} not found).",
            file=sys.stderr,
        )
        raise typer.Exit(1)


def _click_error_class() -> type[Exception]:
    """click's ClickException (typer may vendor its own click, so find it through typer)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    return typer.BadParameter


def _usage_error(error: Exception) -> str:
    """A click usage error (unknown option, value of the wrong type) as one line."""
    message = " ".join(error.format_message().split())  # type: ignore[attr-defined]
    ctx = getattr(error, "ctx", None)
    path = ctx.command_path if ctx is not None else "wattlab"
    return f"{message.rstrip('.')}; see `{path} --help`."


def main() -> None:
    """Console entry point: WattlabError or a usage error -> one line on stderr, exit code 2."""
    click_error = _click_error_class()
    try:
        code = app(standalone_mode=False, prog_name="wattlab")
    except WattlabError as error:
        print(f"wattlab: error: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(2)
    except click_error as error:  # usage errors: exit 2
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `wattlab`: the help, as is
            print(error.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
            sys.exit(2)
        print(f"wattlab: error: {_usage_error(error)}", file=sys.stderr)
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Abort:
        print("wattlab: interrupted", file=sys.stderr)
        sys.exit(130)
    except Interrupted as stop:
        print(
            f"wattlab: stopped by signal {stop.signum}; a run cut short is stored as failed "
            "(run the sweep again to resume).",
            file=sys.stderr,
        )
        sys.exit(128 + stop.signum)
    except KeyboardInterrupt:
        print("wattlab: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
