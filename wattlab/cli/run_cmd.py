"""`wattlab run`: train one configuration under the energy monitor and store it in the
database; print its row (or write it as ``--json``) and exit 1 when the run failed."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from wattlab.cli.choices import Dataset, choice_callback
from wattlab.cli.measurement import (
    CPU_LOAD,
    INTERVAL_S,
    RAM_MEASURE,
    MeasurementFlags,
    resolve_device,
)
from wattlab.cli.mlflow_log import log_to_mlflow
from wattlab.cli.options import (
    BatchSize,
    BudgetSamples,
    CarbonIntensity,
    CpuLoad,
    CpuTdp,
    CpuThreads,
    DataDir,
    Db,
    EpochEvalSamples,
    Epochs,
    Gpus,
    ImageSize,
    IntensityRange,
    IntensityTrace,
    Interval,
    JsonOut,
    LearningRate,
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
    Pue,
    RamMeasure,
    Recipe,
    Region,
    Seed,
    Stem,
    SyntheticVersion,
    TestSamples,
    TrainSamples,
    WarmupSteps,
    endpoint_option,
    project_after_settings,
)
from wattlab.errors import WattlabError


def run(
    ctx: typer.Context,
    model: Model = None,
    model_factory: ModelFactory = None,
    stem: Stem = "cifar",
    image_size: ImageSize = 32,
    dataset: Annotated[
        str,
        typer.Option(
            "--dataset",
            help="synthetic (offline default) | cifar10",
            callback=choice_callback("--dataset", Dataset),
        ),
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
        Optional[str], typer.Option("--device", help="cuda | cpu (default: cuda if present).")
    ] = None,
    gpus: Gpus = 1,
    nproc: Nproc = 1,
    cpu_threads: CpuThreads = None,
    nnodes: Nnodes = 1,
    node_rank: NodeRank = 0,
    rdzv_endpoint: Annotated[
        Optional[str],
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
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
    ] = True,
    region: Region = None,
    intensity_trace: IntensityTrace = None,
    mlflow: Mlflow = False,
) -> None:
    """Train one configuration under the energy monitor and store it in the database."""
    from wattlab.cli.render import written_after_work
    from wattlab.experiment.result_json import run_result
    from wattlab.experiment.runs.runner import run as run_config
    from wattlab.train.config import make_run_config

    measuring = MeasurementFlags.from_params(ctx.params).settings(mlflow=mlflow)
    carbon = measuring.carbon
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
        device=resolve_device(device),
        gpus=gpus,
        nproc=nproc,
        cpu_threads=cpu_threads,
        power_limit_w=power_limit,
        power_limit_fraction=power_limit_fraction,
        codecarbon=codecarbon,
        **project_after_settings(project_after, project_after_epochs, project_after_fraction),
    )
    opts = measuring.worker_options(
        db, progress=progress and json_path != "-", codecarbon_country=codecarbon_country
    )
    from wattlab import stop_signals

    stop_signals.at_stake(stop_signals.RUN_AT_STAKE)
    outcome = run_config(cfg, opts, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint)
    if mlflow and outcome.run_id is not None and outcome.stored:
        log_to_mlflow(db, [outcome.run_id])
    json_lost = False
    if json_path and outcome.row is not None:
        done = (
            f"the run is stored as {outcome.status} (run {outcome.run_id})"
            if outcome.run_id is not None and outcome.stored
            else "the run ran"
        )
        json_lost = not written_after_work(run_result(outcome.row, carbon.source), json_path, done)
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
    if json_lost:
        raise typer.Exit(1)  # the run ran and is stored: exit 1, not 2 (docs/errors.md)
