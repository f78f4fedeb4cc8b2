"""The `wattlab` command line: parse, call one function, print. No logic a test would want.

Bad input raises a WattlabError; ``main`` prints its one sentence and exits with code 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from wattlab.errors import Interrupted, WattlabError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Measure, compare and predict the energy, time and CO2e of deep-learning training.",
)

# --- shared options ----------------------------------------------------------------------
JsonOpt = typer.Option(None, "--json", help="Write a machine-readable result here ('-' = stdout).")
IntensityOpt = typer.Option(
    None, "--carbon-intensity", help="kgCO2e per kWh (default 0.20, the reference study's)."
)
RangeOpt = typer.Option(
    None, "--intensity-range", help="LOW:HIGH kgCO2e/kWh for the sensitivity range (0.10:0.30)."
)
PueOpt = typer.Option(None, "--pue", help="Power usage effectiveness of the facility (1.0).")
PowercapOpt = typer.Option(
    None,
    "--powercap-root",
    help="Where the powercap sysfs is mounted (default $WATTLAB_POWERCAP_ROOT or "
    "/sys/class/powercap).",
)
CpuTdpOpt = typer.Option(None, "--cpu-tdp", help="CPU TDP in W for the CPU estimate.")


def _powercap_root(value: str | None) -> Path | None:
    root = value or os.environ.get("WATTLAB_POWERCAP_ROOT")
    if root is None:
        return None
    path = Path(root)
    if not path.is_dir():
        raise WattlabError(f"the powercap root {root} does not exist or is not a folder.")
    return path


def _measurement_settings(
    interval: float,
    carbon_intensity: float | None,
    intensity_range: str | None,
    pue: float | None,
    powercap_root: str | None,
    json_path: str | None,
):
    """Check the flags every measuring command shares; return (CarbonSettings, powercap root)."""
    from wattlab.carbon import settings_from_flags
    from wattlab.jsonio import check_writable

    check_writable(json_path)
    if not interval > 0:
        raise WattlabError(f"--interval must be a positive number of seconds, got {interval}.")
    carbon = settings_from_flags(carbon_intensity, intensity_range, pue)
    return carbon, _powercap_root(powercap_root)


def _console():
    from wattlab.cli.render import make_console

    return make_console()


# --- devices -----------------------------------------------------------------------------
@app.command()
def devices(
    powercap_root: str | None = PowercapOpt,
    cpu_tdp: float | None = CpuTdpOpt,
    json_path: str | None = JsonOpt,
) -> None:
    """List every meter found, its provenance, and for anything missing why and how to fix it."""
    from wattlab.jsonio import check_writable, dump_json
    from wattlab.meters.discover import describe_discovery, discover_meters

    check_writable(json_path)
    discovery = discover_meters(powercap_root=_powercap_root(powercap_root), cpu_tdp_w=cpu_tdp)
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
    interval: float = typer.Option(0.1, "--interval", help="Sampling period in seconds."),
    json_path: str | None = JsonOpt,
    csv_trace: str | None = typer.Option(
        None, "--csv-trace", help="Write the power trace (t_s, component, power_w) as CSV."
    ),
    carbon_intensity: float | None = IntensityOpt,
    intensity_range: str | None = RangeOpt,
    pue: float | None = PueOpt,
    powercap_root: str | None = PowercapOpt,
    cpu_tdp: float | None = CpuTdpOpt,
    idle_s: float = typer.Option(
        0.0, "--idle-baseline", help="Seconds of idle measurement before CMD (0 = none)."
    ),
) -> None:
    """Run CMD (after --) and report its energy: `wattlab monitor -- python train.py`."""
    from wattlab.carbon import settings_from_flags
    from wattlab.cli.watch import monitor_command

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise WattlabError(
            "give the command to measure after --, e.g. wattlab monitor -- python train.py."
        )
    if command[0].startswith("-") and command[0] != "-":
        raise WattlabError(f"unknown option {command[0]!r}; put the command to measure after --.")
    carbon = settings_from_flags(carbon_intensity, intensity_range, pue)
    code = monitor_command(
        command,
        interval_s=interval,
        carbon=carbon,
        json_path=json_path,
        csv_trace=csv_trace,
        powercap_root=_powercap_root(powercap_root),
        cpu_tdp_w=cpu_tdp,
        idle_s=idle_s,
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
    model: str = typer.Option(
        "resnet18",
        help="resnet18|resnet34|resnet50|mobilenet_v2|mobilenet_v3_small|vgg16|efficientnet_b0",
    ),
    stem: str = typer.Option("cifar", help="cifar (3x3 stride-1 conv, no max-pool) | imagenet"),
    dataset: str = typer.Option("synthetic", help="synthetic (offline default) | cifar10"),
    data_dir: str | None = typer.Option(None, help="Folder with cifar-10-batches-py."),
    train_samples: int | None = typer.Option(None, help="Use only the first N train images."),
    test_samples: int | None = typer.Option(None, help="Use only the first N test images."),
    precision: str = typer.Option("fp32", help="fp32 | tf32 | amp-bf16 | amp-fp16"),
    compile_model: bool = typer.Option(False, "--compile", help="torch.compile the model."),
    cuda_graphs: bool = typer.Option(
        False, "--cuda-graphs", help="Replay each step as a CUDA graph (one GPU; not amp-fp16)."
    ),
    epochs: int | None = typer.Option(None, help="Budget in epochs."),
    budget_samples: int | None = typer.Option(None, help="Budget in training samples."),
    batch_size: int = typer.Option(256, help="Global batch size (split over processes)."),
    lr: float | None = typer.Option(None, help="Peak learning rate (default 0.2)."),
    seed: int = typer.Option(0, help="Random seed."),
    warmup_steps: int | None = typer.Option(None, help="Untimed warm-up steps (10)."),
    device: str | None = typer.Option(None, help="cuda | cpu (default: cuda if present)."),
    gpus: int = typer.Option(1, help="GPUs (one process each, DDP over NCCL)."),
    nproc: int = typer.Option(1, help="CPU processes (gloo) with --device cpu."),
    nnodes: int = typer.Option(1, help="Machines (torchrun)."),
    node_rank: int = typer.Option(0, help="This machine's rank (torchrun)."),
    rdzv_endpoint: str | None = typer.Option(None, help="HOST:PORT rendezvous (torchrun)."),
    power_limit: float | None = typer.Option(None, help="Per-GPU power limit in W."),
    power_limit_fraction: float | None = typer.Option(
        None, help="Per-GPU power limit as a fraction of the default limit."
    ),
    codecarbon: bool = typer.Option(False, help="Also run CodeCarbon's offline tracker."),
    codecarbon_country: str = typer.Option("USA", help="ISO code for CodeCarbon's offline mode."),
    project_after: int | None = typer.Option(
        None, help="STEP: project total energy after K epochs."
    ),
    db: str = typer.Option("wattlab.db", help="SQLite results database."),
    interval: float = typer.Option(0.1, "--interval", help="Sampling period in seconds."),
    carbon_intensity: float | None = IntensityOpt,
    intensity_range: str | None = RangeOpt,
    pue: float | None = PueOpt,
    powercap_root: str | None = PowercapOpt,
    cpu_tdp: float | None = CpuTdpOpt,
    json_path: str | None = JsonOpt,
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Train one configuration under the energy monitor and store it in the database."""
    from wattlab.experiment.runner import run as run_config
    from wattlab.experiment.worker import WorkerOptions
    from wattlab.jsonio import dump_json
    from wattlab.train.config import make_run_config

    carbon, root = _measurement_settings(
        interval, carbon_intensity, intensity_range, pue, powercap_root, json_path
    )
    cfg = make_run_config(
        model=model,
        stem=stem,
        dataset=dataset,
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
        project_after=project_after,
    )
    opts = WorkerOptions(
        db_path=db,
        carbon=carbon,
        interval_s=interval,
        powercap_root=str(root) if root else None,
        cpu_tdp_w=cpu_tdp,
        progress=progress and json_path != "-",
        codecarbon_country=codecarbon_country,
    )
    outcome = run_config(cfg, opts, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint)
    if json_path and outcome.row is not None:
        dump_json(outcome.row, json_path)
    if outcome.status == "ok" and outcome.row is not None and opts.progress:
        from wattlab.cli.render import print_run_row

        print_run_row(outcome.row)
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
    spec: str = typer.Argument(
        ..., help="A sweep YAML file or a preset: paper-12, quickstart, h200-1gpu."
    ),
    db: str = typer.Option("wattlab.db", help="SQLite results database."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and stop."),
    data_dir: str | None = typer.Option(None, help="Folder with cifar-10-batches-py."),
    device: str | None = typer.Option(
        None, help="Override the spec's device: cuda | cpu | auto (a GPU if there is one)."
    ),
    interval: float = typer.Option(0.1, "--interval", help="Sampling period in seconds."),
    carbon_intensity: float | None = IntensityOpt,
    intensity_range: str | None = RangeOpt,
    pue: float | None = PueOpt,
    powercap_root: str | None = PowercapOpt,
    cpu_tdp: float | None = CpuTdpOpt,
    json_path: str | None = JsonOpt,
    resume: bool = typer.Option(
        False, "--resume", help="Continue a stored sweep (the same as running it again)."
    ),
    # --- SLURM (--executor slurm); see docs/cluster.md ---
    executor: str = typer.Option("local", help="Where runs execute: local | slurm (job array)."),
    partition: str | None = typer.Option(None, help="SLURM partition."),
    gpus_per_task: int | None = typer.Option(
        None, help="SLURM GPUs per task (default: the run's GPU count)."
    ),
    cpus_per_task: int | None = typer.Option(None, help="SLURM CPUs per task."),
    time_limit: int = typer.Option(60, "--time-limit", help="SLURM time limit per task (min)."),
    account: str | None = typer.Option(None, help="SLURM account to charge."),
    sbatch_flag: list[str] = typer.Option(
        [], "--sbatch-flag", help="Extra sbatch option, repeatable: --sbatch-flag=--qos=high."
    ),
    array_parallelism: int | None = typer.Option(
        None, help="SLURM array tasks running at once (default: no limit of ours)."
    ),
    slurm_folder: str | None = typer.Option(
        None, help="Shared folder for task results and logs (default: wattlab-slurm/ by --db)."
    ),
    slurm_poll: float = typer.Option(5.0, help="Seconds between looks at the SLURM queue."),
) -> None:
    """Run a grid of configurations with repetitions; resumable; each run in its own process."""
    from wattlab.cli.sweep_view import print_plan, run_with_progress
    from wattlab.experiment.spec import load_spec
    from wattlab.experiment.store import open_store
    from wattlab.experiment.sweep import MachineFacts, make_plan
    from wattlab.experiment.worker import WorkerOptions
    from wattlab.jsonio import dump_json

    carbon, root = _measurement_settings(
        interval, carbon_intensity, intensity_range, pue, powercap_root, json_path
    )
    from wattlab.experiment.executors import EXECUTORS

    if executor not in EXECUTORS:
        raise WattlabError(f"--executor {executor!r} is unknown; allowed: {', '.join(EXECUTORS)}.")
    slurm = None
    if executor == "slurm":
        slurm = _slurm_options(
            db, slurm_folder, partition, gpus_per_task, cpus_per_task, time_limit, account,
            sbatch_flag, array_parallelism, slurm_poll,
        )  # fmt: skip
    if device == "auto":  # the demo: the GPU when there is one, else the CPU
        device = _resolve_device(None)
    sweep_spec = load_spec(spec, data_dir=data_dir, device=device)
    with open_store(db) as store:
        machine = MachineFacts.detect() if slurm is None else _cluster_machine()
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
        progress=False,
    )
    if slurm is None:
        outcomes = run_with_progress(plan, opts)
    else:
        from wattlab.cli.slurm_view import run_on_slurm_with_lines

        outcomes = run_on_slurm_with_lines(plan, opts, slurm)
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
    db: str = typer.Option("wattlab.db", help="SQLite results database."),
    sweep_name: str | None = typer.Option(None, "--sweep", help="Report one sweep's runs."),
    out: str | None = typer.Option(None, "--out", help="Folder for report.md/.html + figures."),
    baseline: str | None = typer.Option(
        None, help="Reference configuration, KEY=VALUE,... (e.g. gpus=1,precision=fp32)."
    ),
    min_saving: float = typer.Option(
        0.03,
        "--region-min-saving",
        "--min-saving",
        help="Operating region: least energy saved against the same configuration at its "
        "highest power limit (fraction).",
    ),
    max_penalty: float = typer.Option(
        0.02,
        "--region-max-slowdown",
        "--max-penalty",
        help="Operating region: most extra time against that configuration (fraction).",
    ),
    import_profile: str | None = typer.Option(
        None, help="Analyse a Zeus-style power-limit profile CSV instead of the database."
    ),
    baseline_w: float | None = typer.Option(None, help="The profile's reference limit (W)."),
    json_path: str | None = JsonOpt,
) -> None:
    """Tables, figures and the operating region: report.md and a self-contained report.html."""
    from wattlab.jsonio import check_writable, dump_json

    check_writable(json_path)
    if not 0 <= min_saving < 1:
        raise WattlabError(f"--region-min-saving must be a fraction in [0, 1), got {min_saving}.")
    if not 0 <= max_penalty < float("inf"):
        raise WattlabError(
            f"--region-max-slowdown must be a finite fraction >= 0, got {max_penalty}."
        )
    if out is None and json_path is None:
        raise WattlabError("give --out DIR for the report, or --json PATH for the summary.")
    if import_profile is not None:
        from wattlab.analysis.profile_report import write_profile_report
        from wattlab.analysis.profiles import analyze_profile, load_zeus_profile

        profile = load_zeus_profile(import_profile)
        analysis = analyze_profile(profile, min_saving, max_penalty, baseline_w)
        if out is not None:
            Path(out).mkdir(parents=True, exist_ok=True)
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
    with open_store(db, create=False) as store:
        runs = store.runs(sweep=sweep_name)
        windows = store.windows()
        trace = store.trace()
        scheduler_jobs = store.scheduler_jobs()
    if sweep_name is not None and len(runs) == 0:
        raise WattlabError(f"the database {db} holds no runs of sweep {sweep_name!r}.")
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
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
        with open_store(db, create=False) as store:
            return store.runs(status="ok"), store.windows()
    from wattlab.estimate.reference import load_default_reference, load_reference_csv

    if data is not None:
        return load_reference_csv(data)
    return load_default_reference()


@estimate_app.callback()
def estimate(
    ctx: typer.Context,
    model: str | None = typer.Option(None, help="Model name, e.g. resnet50."),
    stem: str = typer.Option("cifar", help="cifar | imagenet (ResNets)."),
    gpus: int = typer.Option(1, help="GPU count."),
    precision: str = typer.Option("fp32", help="fp32 | tf32 | amp-bf16 | amp-fp16"),
    epochs: float | None = typer.Option(None, help="Epochs to train."),
    batch_size: int = typer.Option(256, help="Global batch size."),
    train_size: int = typer.Option(50_000, help="Training images per epoch."),
    gpu_name: str | None = typer.Option(None, help='GPU name, e.g. "NVIDIA H200".'),
    gpu_tdp: float | None = typer.Option(None, help="Override the GPU's TDP (W)."),
    power_limit: float | None = typer.Option(None, help="Per-GPU power limit (W)."),
    duration_s: float | None = typer.Option(None, help="Expected duration for TDP baselines."),
    db: str | None = typer.Option(None, help="Fit PRE on this database's runs."),
    data: str | None = typer.Option(None, help="Fit PRE on this reference CSV."),
    carbon_intensity: float | None = IntensityOpt,
    intensity_range: str | None = RangeOpt,
    pue: float | None = PueOpt,
    json_path: str | None = JsonOpt,
) -> None:
    """wattlab estimate --model resnet50 --gpus 2 --precision amp-bf16 --epochs 30
    --gpu-name "NVIDIA H200": every method's prediction side by side."""
    if ctx.invoked_subcommand is not None:
        return
    from wattlab.carbon import settings_from_flags
    from wattlab.errors import DataError
    from wattlab.estimate.evaluate import estimate_all, format_estimates
    from wattlab.jsonio import check_writable, dump_json

    check_writable(json_path)
    if model is None or epochs is None:
        raise WattlabError("give at least --model NAME and --epochs N (see --help).")
    carbon = settings_from_flags(carbon_intensity, intensity_range, pue)
    runs_df = None
    pre_note = None
    try:
        runs_df, _ = _estimate_runs(db, data)
    except DataError as error:
        if db is not None or data is not None:
            raise
        pre_note = str(error)
    estimates = estimate_all(
        model=model,
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
        runs_df=runs_df,
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
    db: str | None = typer.Option(None, help="Evaluate on this database's runs."),
    data: str | None = typer.Option(None, help="Evaluate on this reference CSV."),
    out: str | None = typer.Option(None, "--out", help="Folder for the table and plot."),
    target: str = typer.Option("total", help="Energy to predict: total | gpu."),
    json_path: str | None = JsonOpt,
) -> None:
    """RMSE, MAPE and median APE of every method against measured runs (PRE leave-one-
    configuration-out)."""
    from wattlab.estimate.evaluate import evaluate_methods, write_evaluation
    from wattlab.jsonio import check_writable, dump_json

    check_writable(json_path)
    if target not in ("total", "gpu"):
        raise WattlabError(f"--target must be total or gpu, got {target!r}.")
    runs_df, windows_df = _estimate_runs(db, data)
    result = evaluate_methods(runs_df, windows_df, target_column=f"energy_{target}_j")
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        paths = write_evaluation(result, out)
        if json_path != "-":
            print(f"evaluation: {paths['markdown']}")
    if json_path:
        dump_json(result.to_dict(), json_path)
    if json_path != "-":
        print(Path(paths["markdown"]).read_text() if out is not None else result.to_json())


# --- export ------------------------------------------------------------------------------
@app.command()
def export(
    db: str = typer.Option("wattlab.db", help="SQLite results database."),
    fmt: str = typer.Option("csv", "--format", help="csv | parquet | json"),
    out: str = typer.Option(..., "--out", help="Folder to write the tables into."),
    sweep_name: str | None = typer.Option(None, "--sweep", help="Only this sweep's runs."),
) -> None:
    """Write the runs, windows, trace and sweeps tables as files for pandas users."""
    from wattlab.experiment.export import export_tables
    from wattlab.experiment.store import open_store

    with open_store(db, create=False) as store:
        paths = export_tables(store, out, fmt, sweep=sweep_name)
    for path in paths:
        print(path)


power_app = typer.Typer(help="GPU power-limit journal.", no_args_is_help=True)
app.add_typer(power_app, name="power")


@power_app.command("restore")
def power_restore() -> None:
    """Put back the GPU power limits a killed run left behind (from the journal)."""
    from wattlab.experiment.runner import restore_pending_limits

    restored = restore_pending_limits()
    if not restored:
        print("nothing to restore: no power-limit journal was left behind.")
    for entry in restored:
        print(f"restored {entry}")


def main() -> None:
    """Console entry point: WattlabError -> one sentence on stderr, exit code 2."""
    try:
        app()
    except WattlabError as error:
        print(f"wattlab: error: {error}", file=sys.stderr)
        sys.exit(2)
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


if __name__ == "__main__":
    main()
