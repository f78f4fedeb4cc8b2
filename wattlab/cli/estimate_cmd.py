"""`wattlab estimate`: every method's prediction of a configuration's energy, time and CO2e
before training; `estimate evaluate` scores the methods on measured runs; `estimate
power-limits` predicts a run's energy and time under GPU power limits without capping."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from wattlab.cli.choices import Protocol, StepMethod, Target, choice_callback, step_method_help
from wattlab.cli.measurement import MeasurementFlags
from wattlab.cli.options import (
    CarbonIntensity,
    DurationS,
    EstimateBatchSize,
    EstimateEpochs,
    EstimateGpus,
    EstimatePowerLimit,
    EvaluationDir,
    GpuName,
    GpuTdp,
    ImageSize,
    IntensityRange,
    JsonOut,
    Model,
    ModelFactory,
    Precision,
    Pue,
    Stem,
    TrainSize,
    bounded,
)
from wattlab.errors import WattlabError

estimate_app = typer.Typer(
    invoke_without_command=True,
    help="Predict a configuration's energy, time and CO2e before training; evaluate methods.",
)


@estimate_app.callback()
def estimate(
    ctx: typer.Context,
    model: Model = None,
    model_factory: ModelFactory = None,
    stem: Stem = "cifar",
    image_size: ImageSize = 32,
    gpus: EstimateGpus = 1,
    precision: Precision = "fp32",
    epochs: EstimateEpochs = None,
    batch_size: EstimateBatchSize = 256,
    train_size: TrainSize = 50_000,
    gpu_name: GpuName = None,
    gpu_tdp: GpuTdp = None,
    power_limit: EstimatePowerLimit = None,
    duration_s: DurationS = None,
    db: Annotated[
        Optional[str], typer.Option("--db", help="Fit PRE on this database's runs.")
    ] = None,
    data: Annotated[
        Optional[str], typer.Option("--data", help="Fit PRE on this reference CSV.")
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
    from wattlab.estimate.sources import pre_fit as source_pre_fit
    from wattlab.jsonio import dump_json

    if (model is None and model_factory is None) or epochs is None:
        raise WattlabError(
            "give at least --model NAME (or --model-factory FILE.py:FUNC) and --epochs N "
            "(see --help)."
        )
    carbon = MeasurementFlags.from_params(ctx.params).carbon()
    pre_fit, pre_note = source_pre_fit(db, data)
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
        Optional[str], typer.Option("--db", help="Evaluate on this database's runs.")
    ] = None,
    data: Annotated[
        Optional[str], typer.Option("--data", help="Evaluate on this reference CSV.")
    ] = None,
    out: EvaluationDir = None,
    target: Annotated[
        str,
        typer.Option(
            "--target",
            help="Energy every method predicts and is scored on: total | paper | gpu.",
            callback=choice_callback("--target", Target),
        ),
    ] = "total",
    protocol: Annotated[
        str,
        typer.Option(
            "--protocol",
            help="PRE's held-out group: loco | lomo | lopo | lofo | lobo | logo | all "
            "(configuration/model/precision/architecture family/batch size/GPU).",
            callback=choice_callback("--protocol", Protocol),
        ),
    ] = "all",
    step_method: Annotated[
        str,
        typer.Option(
            "--step-method",
            help=step_method_help(),
            callback=choice_callback("--step-method", StepMethod),
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
    equal_information: Annotated[
        str,
        typer.Option(
            "--equal-information",
            help="With --step-method both: also score the published and step-level STEP rules "
            "reading the same shares of each budget (comma-separated, or none).",
        ),
    ] = "0.2,0.5,0.875",
    json_path: JsonOut = None,
) -> None:
    """RMSE, MAPE, bias and interval coverage of every method on the same runs and target,
    under each protocol."""
    from wattlab.errors import echo
    from wattlab.estimate.evaluate import evaluate_methods, evaluation_markdown, write_evaluation
    from wattlab.estimate.sources import measured_runs, measured_traces
    from wattlab.jsonio import dump_json, staged_folder

    if step_start == "fluss":
        stable_epoch = None
    elif step_start.isdigit() and 1 <= int(step_start) <= 100_000:
        stable_epoch = int(step_start)
    else:
        raise WattlabError(
            f"--step-start must be an epoch number >= 1 or fluss, got {echo(step_start)}."
        )
    from wattlab.estimate import equal_information as equal
    from wattlab.estimate import methods

    both = step_method == methods.ALL_STEP_RULES
    shares = equal.parse_fractions(equal_information) if both else ()
    runs_df, windows_df = measured_runs(db, data)
    traces_df = measured_traces(db) if methods.reads_trace(step_method) else None
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
    if shares:
        result.equal_information = equal.compare(
            runs_df, windows_df, target=target, fractions=shares, traces_df=traces_df
        )
    if out is not None:
        with staged_folder(out) as staging:  # moved into place whole, or not at all
            paths = write_evaluation(result, staging)
        if json_path != "-":
            print(f"evaluation: {Path(out) / paths['markdown'].name}")
    if json_path:
        dump_json(result.to_dict(), json_path)
    if json_path != "-":
        print(evaluation_markdown(result))


@estimate_app.command("power-limits")
def estimate_power_limits(
    db: Annotated[
        Optional[str], typer.Option("--db", help="SQLite results database with the run.")
    ] = None,
    run_id: Annotated[
        Optional[int],
        typer.Option(
            "--run", help="Id of an uncapped run in --db.", callback=bounded("--run", "run_id")
        ),
    ] = None,
    limits: Annotated[
        Optional[str],
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
        Optional[str],
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
    from wattlab.experiment.db.store import open_store

    with open_store(db, readonly=True) as store:
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
