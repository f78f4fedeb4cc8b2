"""`wattlab advise`: the least-energy configuration within a time limit, and `advise evaluate`.

Parse, call ``wattlab.estimate.advise``, print. Registered in ``app.py`` with one line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from wattlab.cli.choices import Dataset, HoldOut, choice_callback
from wattlab.cli.measurement import MeasurementFlags
from wattlab.cli.options import (
    CarbonIntensity,
    DataDir,
    EstimateBatchSize,
    EstimateEpochs,
    EstimateGpus,
    GpuName,
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

if TYPE_CHECKING:
    from wattlab.estimate.advise.advisor import Advice

advise_app = typer.Typer(
    invoke_without_command=True,
    help="The least-energy way to train within a time limit (predicted; changes no setting); "
    "evaluate scores the advice on models it never saw.",
)

MaxSlowdown = Annotated[
    Optional[float],
    typer.Option(
        "--max-slowdown",
        help="At most this many percent slower than the current configuration (0 = no slower).",
        callback=bounded("--max-slowdown", "max_slowdown_percent"),
    ),
]
DeadlineS = Annotated[
    Optional[float],
    typer.Option(
        "--deadline-s",
        help="Finish within this many seconds.",
        callback=bounded("--deadline-s", "duration_s"),
    ),
]
Allow = Annotated[
    Optional[str],
    typer.Option(
        "--allow",
        help="Knobs the advice may change, comma-separated: precision, graphs, power-limit, gpus, "
        "batch (default: all but batch, which changes convergence).",
    ),
]
RunId = Annotated[
    Optional[int],
    typer.Option(
        "--run", help="Start from this stored run (with --db).", callback=bounded("--run", "run_id")
    ),
]


def probe_seconds(value: str | None) -> str | None:
    """--probe's value: 'auto' (the default length), or seconds within the bounds."""
    if value is None or value == "auto":
        return value
    try:
        seconds = float(value)
    except ValueError:
        raise typer.BadParameter(
            f"--probe takes a number of seconds or 'auto', got {value[:40]!r}."
        ) from None
    return str(bounded("--probe", "probe_s")(seconds))


Probe = Annotated[
    Optional[str],
    typer.Option(
        "--probe",
        help="Measure the candidates on this machine for about this many seconds, in one warm "
        "process, interleaved, and rank by what was measured (--probe alone or 'auto': the "
        "smaller of 30 s and 5 % of the predicted training, or PRE's advice where probing "
        "cannot pay off). Nothing is stored.",
        callback=probe_seconds,
    ),
]
ProbeDataset = Annotated[
    str,
    typer.Option(
        "--dataset",
        help="The probe's data: synthetic (offline) or cifar10 (with --data-dir).",
        callback=choice_callback("--dataset", Dataset),
    ),
]
Rows = Annotated[
    int,
    typer.Option(
        "--rows", help="Rows of the table to print.", callback=bounded("--rows", "advise_rows")
    ),
]


def _pre_fit(data: str | None):
    from wattlab.estimate import pre_cache

    return lambda: pre_cache.fit_reference(data)


@advise_app.callback()
def advise(
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
    max_slowdown: MaxSlowdown = None,
    deadline_s: DeadlineS = None,
    allow: Allow = None,
    db: Annotated[
        Optional[str],
        typer.Option("--db", help="SQLite results database with the run (--run)."),
    ] = None,
    run_id: RunId = None,
    data: Annotated[
        Optional[str], typer.Option("--data", help="Fit PRE on this reference CSV (default: H200).")
    ] = None,
    carbon_intensity: CarbonIntensity = None,
    intensity_range: IntensityRange = None,
    pue: Pue = None,
    probe: Probe = None,
    dataset: ProbeDataset = "synthetic",
    data_dir: DataDir = None,
    rows: Rows = 12,
    json_path: JsonOut = None,
) -> None:
    """wattlab advise --model resnet50 --gpu-name H200 --epochs 30 --max-slowdown 5: the ranked
    configurations, the first one as advice in one sentence."""
    if ctx.invoked_subcommand is not None:
        return
    from wattlab.estimate.advise.probe import inductor_cache_in_temp

    # torch's compiler makes its cache folder in $TMPDIR when PRE or the probe imports it;
    # advise keeps nothing, so it goes into a temporary folder removed afterwards
    with inductor_cache_in_temp():
        from wattlab.estimate.advise import advise as advise_fn
        from wattlab.estimate.advise import advise_from_run
        from wattlab.estimate.advise.probe import Trainee, stored_trainee
        from wattlab.estimate.advise.probe import probe as probe_advice
        from wattlab.jsonio import dump_json

        if max_slowdown is not None and deadline_s is not None:
            raise WattlabError("give --max-slowdown or --deadline-s, not both.")
        carbon = MeasurementFlags.from_params(ctx.params).carbon()
        if run_id is not None or db is not None:
            if db is None or run_id is None:
                raise WattlabError("give both --db FILE and --run ID to start from a stored run.")
            if model is not None or epochs is not None:
                raise WattlabError(
                    "--db/--run take the configuration from the stored run; leave out --model and "
                    "--epochs (--model-factory only names the run's own factory, to import it)."
                )
            if not Path(db).exists():
                raise WattlabError(f"no database at {db}.")
            from wattlab.estimate.advise.knobs import parse_allow
            from wattlab.experiment.db.store import open_store

            parse_allow(allow)  # an unknown knob before anything is read
            with open_store(db, create=False, readonly=True) as store:
                runs, windows, trace = store.runs(), store.windows([run_id]), store.trace([run_id])
            _check_named_factory(runs, run_id, model_factory)
            # a factory the run names is imported only when --model-factory names it again
            trainee: Trainee | None = (
                stored_trainee(runs, run_id, model_factory) if probe is not None else None
            )
            with _probe_cap(probe if model_factory else None):  # PRE counts the factory's model
                result = advise_from_run(
                    runs, windows, trace, run_id, max_slowdown_percent=max_slowdown,
                    deadline_s=deadline_s, allow=allow, pre_fit=_pre_fit(data), carbon=carbon,
                    model_factory=model_factory,
                )  # fmt: skip
            if result.not_imported:
                print(f"wattlab: {result.not_imported}.", file=sys.stderr)
        else:
            if (model is None and model_factory is None) or epochs is None or not gpu_name:
                if not gpu_name and (model is not None or model_factory is not None):
                    from wattlab.estimate.specs import name_a_gpu

                    raise WattlabError(f"give --gpu-name: {name_a_gpu()}.")
                raise WattlabError(
                    "give --model NAME (or --model-factory FILE.py:FUNC), --gpu-name G and "
                    "--epochs N, or --db FILE --run ID (see --help)."
                )
            with _probe_cap(probe if model_factory else None):  # PRE counts the factory's model
                result = advise_fn(
                    model=model, model_factory=model_factory, gpu_name=gpu_name, epochs=epochs,
                    train_size=train_size, batch_size=batch_size, precision=precision,
                    gpus=gpus, image_size=image_size, stem=stem, max_slowdown_percent=max_slowdown,
                    deadline_s=deadline_s, allow=allow, pre_fit=_pre_fit(data), carbon=carbon,
                )  # fmt: skip
            trainee = Trainee(
                model=model, model_factory=model_factory, stem=stem, image_size=image_size,
                dataset=dataset, data_dir=data_dir,
            )  # fmt: skip
        if probe is not None:
            assert trainee is not None
            result = probe_advice(
                result, trainee, seconds=None if probe == "auto" else float(probe), carbon=carbon,
                say=lambda line: print(line, file=sys.stderr, flush=True),
            )  # fmt: skip
        written = True
        if json_path and probe is not None:  # the probe ran: a lost output is exit 1, not 2
            from wattlab.cli.render import written_after_work

            written = written_after_work(
                result.to_dict(), json_path, "the probe ran; its advice follows, nothing is stored"
            )
        elif json_path:
            dump_json(result.to_dict(), json_path)
        if json_path != "-":
            print(format_advice(result, rows))
        if not written:
            raise typer.Exit(1)


def _probe_cap(probe: str | None) -> Any:
    """With --probe, a factory's import and call are bounded by the probe's length (the default
    length's 30 s for 'auto'), not $WATTLAB_FACTORY_TIMEOUT_S's 120 s; otherwise nothing."""
    import contextlib

    if probe is None:
        return contextlib.nullcontext()
    from wattlab.estimate.advise.probe import DEFAULT_PROBE_S
    from wattlab.train.factory import time_cap

    seconds = DEFAULT_PROBE_S if probe == "auto" else float(probe)
    return time_cap(seconds, f"--probe {probe}")


def _check_named_factory(runs: Any, run_id: int, model_factory: str | None) -> None:
    """With --db/--run, --model-factory may only name the stored run's own factory."""
    from wattlab.experiment.db.stored_run import StoredRun
    from wattlab.train.factory_ref import same_factory

    if model_factory is None:
        return
    run = StoredRun.in_frame(runs, run_id)
    stored = None if run is None else run.model
    if stored is None or not same_factory(stored, model_factory):
        raise WattlabError(
            f"--model-factory {model_factory} is not run {run_id}'s model ({stored or 'none'}); "
            "with --db/--run it only names the run's own factory, to import it."
        )


def _interval(low: float, high: float, scale: float, digits: str) -> str:
    return f"{low / scale:{digits}}-{high / scale:{digits}}"


def format_advice(result: Advice, rows: int = 12) -> str:
    """The ranked table, the advice sentence and the notes, as plain text."""
    header = (
        f"{'#':>3} {'energy kJ':>9} {'interval':>13} {'time s':>8} {'interval':>13} "
        f"{'CO2e g':>8} {'range':>13} {'saving':>7} {'interval':>13} {'limit':>5}  changes"
    )
    lines = [
        f"{result.model} on {result.gpu_name}, {result.samples:.0f} images, "
        f"{result.limit.describe()}; knobs: {', '.join(result.allowed)}",
        header,
    ]
    shown = [r for r in result.rows[:rows]]
    shown += [r for r in result.rows[rows:] if r.is_current]
    for r in shown:
        saving = f"{r.saving:>6.0%}" if not r.is_current else f"{'now':>6}"
        saving_iv = "" if r.is_current else f"{r.saving_low:.0%} to {r.saving_high:.0%}"
        change = "(current) " + r.source if r.is_current else r.changes
        energy_iv = _interval(r.energy_low_j, r.energy_high_j, 1e3, ".3g")
        time_iv = _interval(r.duration_low_s, r.duration_high_s, 1, ".4g")
        co2e_iv = _interval(r.co2e_low_kg, r.co2e_high_kg, 1e-3, ".3g")
        lines.append(
            f"{r.rank:>3} {r.energy_j / 1e3:>9.3g} {energy_iv:>13} "
            f"{r.duration_s:>8.4g} {time_iv:>13} "
            f"{r.co2e_kg * 1e3:>8.3g} {co2e_iv:>13} "
            f"{saving:>7} {saving_iv:>13} {'yes' if r.meets_limit else 'no':>5}  {change}"
        )  # fmt: skip
    if len(result.rows) > len(shown):
        lines.append(f"... {len(result.rows) - len(shown)} more rows (--rows N, or --json)")
    lines.append("")
    lines.append(result.sentence)
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"CO2e at {result.carbon.describe()}")
    return "\n".join(lines)


@advise_app.command("evaluate")
def advise_evaluate(
    data: Annotated[
        Optional[str],
        typer.Option("--data", help="Reference CSV (default: the shipped ones, every GPU's)."),
    ] = None,
    models: Annotated[
        Optional[str],
        typer.Option("--models", help="Hold out only these models (comma-separated)."),
    ] = None,
    profiles: Annotated[
        Optional[str],
        typer.Option(
            "--profiles",
            help="Folder of Zeus power-limit profiles to score the power-limit knob on (leave "
            "one file out). Default: the copy shipped in the package ($WATTLAB_ZEUS_PROFILES "
            "overrides it).",
        ),
    ] = None,
    hold_out: Annotated[
        str,
        typer.Option(
            "--hold-out",
            help="model (default): fit on the other models' runs; gpu: fit on the other GPUs' "
            "runs and advise every model on the held-out GPU (each prediction a transfer).",
            callback=choice_callback("--hold-out", HoldOut),
        ),
    ] = "model",
    json_path: JsonOut = None,
) -> None:
    """Hold out one model (or one GPU) at a time, advise from the rest, score the advice on
    what was measured: regret, violations, realised saving."""
    from wattlab.estimate import power_caps
    from wattlab.estimate.advise.evaluation import evaluate_advice, evaluation_markdown
    from wattlab.estimate.reference import load_default_reference, load_reference_csv
    from wattlab.jsonio import dump_json

    wanted = None
    if models is not None:
        wanted = [m.strip() for m in models.split(",") if m.strip()]
        if not wanted:
            raise WattlabError(f"--models must name models separated by commas, got {models!r}.")
    from wattlab.estimate.zeus_profiles import profiles_dir

    zeus = power_caps.read_profiles(profiles if profiles is not None else profiles_dir())
    runs, _ = load_reference_csv(data) if data is not None else load_default_reference()
    evaluation = evaluate_advice(runs, profiles=zeus, models=wanted, hold_out=hold_out)
    if json_path:
        dump_json(evaluation.to_dict(), json_path)
    if json_path != "-":
        print(evaluation_markdown(evaluation))
        folds = evaluation.reference["folds"]
        fits = ", ".join(f"{f['model']} {f['fit']} in {f['fit_s']:.1f} s" for f in folds)
        print(f"PRE per held-out {hold_out}: {fits}; {evaluation.seconds:.0f} s in all.")


__all__ = ["advise_app", "format_advice"]
