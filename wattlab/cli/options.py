"""The CLI's options, shared as ``Annotated`` type aliases, and the checks they run at parse time.

Every numeric flag checks its value against ``wattlab.bounds`` (finite, positive where it must
be, a sane upper bound) and every output path is proven writable (a probe file is created and
removed) while the command line is parsed, so a bad value is refused before anything runs. A
refusal is a WattlabError: one sentence on stderr and exit code 2.

To add a numeric flag: give it a ``BOUNDS`` entry in ``wattlab/bounds.py`` and a callback made
by ``bounded(flag, field)``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from wattlab.bounds import check_number
from wattlab.cli.choices import CpuLoad as CpuLoadChoice
from wattlab.cli.choices import Precision as PrecisionChoice
from wattlab.cli.choices import RamMeasure as RamMeasureChoice
from wattlab.cli.choices import Stem as StemChoice
from wattlab.cli.choices import choice_callback
from wattlab.errors import ConfigError
from wattlab.jsonio import check_output_dir, check_writable
from wattlab.step.schedule import (
    check_after_epochs,
    check_after_fraction,
    deprecation_line,
    from_legacy,
)


def bounded(flag: str, field: str) -> Callable[[Any], Any]:
    """A typer callback that refuses a value of ``flag`` outside ``BOUNDS[field]``."""

    def callback(value: Any) -> Any:
        return check_number(field, value, flag)

    return callback


def output_file(value: str | None) -> str | None:
    """A typer callback: the output file can be created ('-' = stdout passes)."""
    check_writable(value)
    return value


def output_dir(value: str | None) -> str | None:
    """A typer callback: files can be written into the folder (nothing is created yet)."""
    if value is not None:
        check_output_dir(value)
    return value


def endpoint_option(value: str | None) -> str | None:
    """A typer callback: --rdzv-endpoint is HOST:PORT (checked before anything starts)."""
    if value is not None:
        from wattlab.launch_args import parse_endpoint

        parse_endpoint("--rdzv-endpoint", value)
    return value


def intensity_range(value: str | None) -> str | None:
    """A typer callback: --intensity-range is LOW:HIGH with both ends inside their bound."""
    if value is not None:
        from wattlab.monitor.carbon import parse_intensity_range

        low, high = parse_intensity_range(value)
        check_number("carbon_intensity_kg_per_kwh", low, "--intensity-range LOW")
        check_number("carbon_intensity_kg_per_kwh", high, "--intensity-range HIGH")
    return value


def _number(flag: str, field: str, help_text: str, **kwargs: Any) -> Any:
    return typer.Option(flag, help=help_text, callback=bounded(flag, field), **kwargs)


# --- outputs and inputs ------------------------------------------------------------------
JsonOut = Annotated[
    Optional[str],
    typer.Option(
        "--json", help="Write a machine-readable result here ('-' = stdout).", callback=output_file
    ),
]
CsvTraceOut = Annotated[
    Optional[str],
    typer.Option(
        "--csv-trace",
        help="Write the power trace (t_s, component, power_w) as CSV.",
        callback=output_file,
    ),
]
ReportDir = Annotated[
    Optional[str],
    typer.Option("--out", help="Folder for report.md/.html + figures.", callback=output_dir),
]
EvaluationDir = Annotated[
    Optional[str],
    typer.Option("--out", help="Folder for the table and plot.", callback=output_dir),
]
ExportDir = Annotated[
    Optional[str],
    typer.Option("--out", help="Folder to write the tables into.", callback=output_dir),
]
Db = Annotated[str, typer.Option("--db", help="SQLite results database.")]
SweepName = Annotated[Optional[str], typer.Option("--sweep", help="Only this sweep's runs.")]
DataDir = Annotated[
    Optional[str], typer.Option("--data-dir", help="Folder with cifar-10-batches-py.")
]

# --- measuring ---------------------------------------------------------------------------
Interval = Annotated[float, _number("--interval", "interval_s", "Sampling period in seconds.")]
CarbonIntensity = Annotated[
    Optional[float],
    _number(
        "--carbon-intensity",
        "carbon_intensity_kg_per_kwh",
        "kgCO2e per kWh (default 0.20, the reference study's).",
    ),
]
IntensityRange = Annotated[
    Optional[str],
    typer.Option(
        "--intensity-range",
        help="LOW:HIGH kgCO2e/kWh for the sensitivity range (0.10:0.30).",
        callback=intensity_range,
    ),
]
Pue = Annotated[
    Optional[float],
    _number("--pue", "pue", "Power usage effectiveness of the facility (1.0)."),
]
PowercapRoot = Annotated[
    Optional[str],
    typer.Option(
        "--powercap-root",
        help="Where the powercap sysfs is mounted (default $WATTLAB_POWERCAP_ROOT or "
        "/sys/class/powercap).",
    ),
]


RamMeasure = Annotated[
    str,
    typer.Option(
        "--ram-measure",
        help="Memory the RAM estimate counts where RAPL has no dram zone: system (all used "
        "memory) or process (resident memory of the measured process tree, as the reference "
        "paper's replication).",
        callback=choice_callback("--ram-measure", RamMeasureChoice),
    ),
]
CpuLoad = Annotated[
    str,
    typer.Option(
        "--cpu-load",
        help="Load the CPU estimate counts where RAPL is unreadable: machine (the whole "
        "machine's busy CPU time: other processes' load counts as the run's) or process (the "
        "CPU time of the measured process tree, exited children included).",
        callback=choice_callback("--cpu-load", CpuLoadChoice),
    ),
]
CpuTdp = Annotated[
    Optional[float], _number("--cpu-tdp", "cpu_tdp_w", "CPU TDP in W for the CPU estimate.")
]
IdleBaseline = Annotated[
    float,
    _number("--idle-baseline", "idle_s", "Seconds of idle measurement before CMD (0 = none)."),
]

# --- the run configuration ---------------------------------------------------------------
Model = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        help="Any torchvision classification model (resnet50, densenet121, convnext_tiny, "
        "vit_b_16, ...; default resnet18).",
    ),
]
ModelFactory = Annotated[
    Optional[str],
    typer.Option(
        "--model-factory",
        help="Your own model: FILE.py:FUNC or package.module:FUNC, called as "
        "FUNC(num_classes=N), returning a fresh nn.Module for 3 x S x S images.",
    ),
]
ImageSize = Annotated[
    int,
    _number(
        "--image-size",
        "image_size",
        "Pixels per side the model sees (the 32x32 data are resized); ViT patches must divide it.",
    ),
]
SyntheticVersion = Annotated[
    int,
    _number(
        "--synthetic-version",
        "synthetic_version",
        "Synthetic task: 2 (default; faint structures, look-alike classes, label noise: "
        "accuracy tells configurations apart) | 1 (the old, easy task).",
    ),
]
Recipe = Annotated[
    int,
    _number(
        "--recipe",
        "recipe",
        "Training recipe: 2 (default; per-family optimiser, batch-scaled rate, warm-up, "
        "clipping) | 1 (SGD at --lr as given, for every model).",
    ),
]
EpochEvalSamples = Annotated[
    int,
    _number(
        "--epoch-eval-samples",
        "epoch_eval_samples",
        "Accuracy on the first N test images after every epoch (energy to accuracy); "
        "0 turns it off.",
    ),
]
TargetAccuracy = Annotated[
    Optional[float],
    _number(
        "--target-accuracy",
        "target_accuracy",
        "Energy to accuracy's target, 0..1 (default: 90 % of the best per-epoch accuracy of "
        "the runs).",
    ),
]
Stem = Annotated[
    str,
    typer.Option(
        "--stem",
        help="cifar (3x3 stride-1 conv, no max-pool) | imagenet",
        callback=choice_callback("--stem", StemChoice),
    ),
]
GpuName = Annotated[Optional[str], typer.Option("--gpu-name", help='GPU name, e.g. "NVIDIA H200".')]
Precision = Annotated[
    str,
    typer.Option(
        "--precision",
        help="fp32 | tf32 | amp-bf16 | amp-fp16",
        callback=choice_callback("--precision", PrecisionChoice),
    ),
]
TrainSamples = Annotated[
    Optional[int],
    _number("--train-samples", "train_samples", "Use only the first N train images."),
]
TestSamples = Annotated[
    Optional[int], _number("--test-samples", "test_samples", "Use only the first N test images.")
]
Epochs = Annotated[Optional[int], _number("--epochs", "epochs", "Budget in epochs.")]
BudgetSamples = Annotated[
    Optional[int],
    _number("--budget-samples", "budget_samples", "Budget in training samples."),
]
BatchSize = Annotated[
    int,
    _number("--batch-size", "batch_size", "Global batch size (split over processes)."),
]
LearningRate = Annotated[
    Optional[float], _number("--lr", "lr", "Peak learning rate (default 0.2).")
]
Seed = Annotated[int, _number("--seed", "seed", "Random seed.")]
WarmupSteps = Annotated[
    Optional[int], _number("--warmup-steps", "warmup_steps", "Untimed warm-up steps (10).")
]
Gpus = Annotated[int, _number("--gpus", "gpus", "GPUs (one process each, DDP over NCCL).")]
Nproc = Annotated[int, _number("--nproc", "nproc", "CPU processes (gloo) with --device cpu.")]
CpuThreads = Annotated[
    Optional[int],
    _number(
        "--cpu-threads",
        "cpu_threads",
        "torch's threads per process with --device cpu (default: one per core); 1 beside other "
        "work.",
    ),
]
Nnodes = Annotated[int, _number("--nnodes", "nnodes", "Machines (torchrun).")]
NodeRank = Annotated[int, _number("--node-rank", "node_rank", "This machine's rank (torchrun).")]
PowerLimit = Annotated[
    Optional[float], _number("--power-limit", "power_limit_w", "Per-GPU power limit in W.")
]
PowerLimitFraction = Annotated[
    Optional[float],
    _number(
        "--power-limit-fraction",
        "power_limit_fraction",
        "Per-GPU power limit as a fraction of the default limit.",
    ),
]


def _after_epochs(value: int | None) -> int | None:
    if value is not None:
        check_number("project_after_epochs", check_after_epochs(value), "--project-after-epochs")
    return value


def _after_fraction(value: float | None) -> float | None:
    return None if value is None else check_after_fraction(value)


def _after_legacy(value: float | None) -> float | None:
    if value is not None:
        check_number("project_after", value, "--project-after")
        from_legacy(value)
    return value


ProjectAfterEpochs = Annotated[
    Optional[int],
    typer.Option(
        "--project-after-epochs",
        help="STEP: project the total energy and time after K epochs (K >= the 2-epoch window).",
        callback=_after_epochs,
    ),
]
ProjectAfterFraction = Annotated[
    Optional[float],
    typer.Option(
        "--project-after-fraction",
        help="STEP: project the total after this fraction of the budget's samples, from "
        "step-level marks (e.g. 0.1; one process).",
        callback=_after_fraction,
    ),
]
ProjectAfter = Annotated[
    Optional[float],
    typer.Option(
        "--project-after",
        help="Deprecated: use --project-after-epochs K or --project-after-fraction F.",
        callback=_after_legacy,
    ),
]


def project_after_settings(
    legacy: float | None, epochs: int | None, fraction: float | None
) -> dict[str, float | int | None]:
    """The RunConfig fields of the STEP flags; the deprecated ``--project-after`` prints one
    line on stderr and becomes the explicit flag it means."""
    if epochs is not None and fraction is not None:
        raise ConfigError("give --project-after-epochs or --project-after-fraction, not both.")
    if legacy is not None:
        if epochs is not None or fraction is not None:
            raise ConfigError(
                "--project-after is the old spelling of --project-after-epochs and "
                "--project-after-fraction; give only one of them."
            )
        print(f"wattlab: warning: {deprecation_line(legacy)}", file=sys.stderr)
        key, number = from_legacy(legacy)
        return {key: number}
    return {"project_after_epochs": epochs, "project_after_fraction": fraction}


# --- the report --------------------------------------------------------------------------
MinSaving = Annotated[
    float,
    typer.Option(
        "--region-min-saving",
        "--min-saving",
        help="Operating region: least energy saved against the same configuration at its "
        "highest power limit (fraction).",
        callback=bounded("--region-min-saving", "min_saving"),
    ),
]
MaxPenalty = Annotated[
    float,
    typer.Option(
        "--region-max-slowdown",
        "--max-penalty",
        help="Operating region: most extra time against that configuration (fraction).",
        callback=bounded("--region-max-slowdown", "max_penalty"),
    ),
]
BaselineW = Annotated[
    Optional[float], _number("--baseline-w", "baseline_w", "The profile's reference limit (W).")
]

# --- estimates ---------------------------------------------------------------------------
EstimateEpochs = Annotated[
    Optional[float], _number("--epochs", "estimate_epochs", "Epochs to train.")
]
EstimateGpus = Annotated[int, _number("--gpus", "gpus", "GPU count.")]
EstimateBatchSize = Annotated[int, _number("--batch-size", "batch_size", "Global batch size.")]
TrainSize = Annotated[int, _number("--train-size", "train_size", "Training images per epoch.")]
GpuTdp = Annotated[
    Optional[float], _number("--gpu-tdp", "gpu_tdp_w", "Override the GPU's TDP (W).")
]
EstimatePowerLimit = Annotated[
    Optional[float], _number("--power-limit", "power_limit_w", "Per-GPU power limit (W).")
]
DurationS = Annotated[
    Optional[float],
    _number("--duration-s", "duration_s", "Expected duration for TDP baselines."),
]


# --- integrations (issue 14) ----------------------------------------------------------------
Region = Annotated[
    Optional[str],
    typer.Option(
        "--region", help="ISO 3166-1 alpha-3 country (FRA, USA, ...): its yearly intensity."
    ),
]
IntensityTrace = Annotated[
    Optional[str],
    typer.Option(
        "--intensity-trace",
        help="CSV of timestamp,intensity_kg_per_kwh: CO2e integrated over the power trace.",
    ),
]
Mlflow = Annotated[
    bool,
    typer.Option("--mlflow", help="Also log each stored run to MLflow ($MLFLOW_TRACKING_URI)."),
]
PrometheusPort = Annotated[
    Optional[int],
    _number("--prometheus-port", "prometheus_port", "Serve live metrics on 127.0.0.1:N."),
]
