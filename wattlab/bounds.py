"""Sane bounds for every number a person can give wattlab: one table for the CLI flags and the
sweep spec's fields.

Every number must be finite, positive where it must be, and below an upper bound far above any
real use but low enough that nothing overflows or runs for years (``--epochs 1e300``,
``--batch-size 99999999999999999999``, ``cooldown_s: .inf``). A value outside its bound is a
ConfigError of one sentence naming where it came from and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wattlab.errors import ConfigError, echo

# The most runs a sweep spec may expand to (grid points x repetitions).
MAX_SWEEP_RUNS = 100_000


@dataclass(frozen=True)
class Bound:
    """An allowed range. ``low_open``: the value must be greater than ``low`` (not equal)."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    unit: str = ""

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        kind = "a whole number" if self.integer else "a number"
        low = f"{self.low:g}" if not self.integer else f"{int(self.low)}"
        high = f"{self.high:g}" if not self.integer else f"{int(self.high)}"
        if self.low_open:
            return f"{kind} > {low} and <= {high}{unit}"
        return f"{kind} from {low} to {high}{unit}"

    def contains(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high


_W = "W"
_S = "s"

# Keyed by the RunConfig / spec field name; CLI flags name the field they fill.
BOUNDS: dict[str, Bound] = {
    # the run configuration
    "batch_size": Bound(1, 2**20, integer=True),
    "image_size": Bound(1, 4096, integer=True),
    "epochs": Bound(1, 100_000, integer=True),
    "budget_samples": Bound(1, 10**12, integer=True),
    "budget_s": Bound(0, 86_400, low_open=True, unit=_S),
    "train_samples": Bound(1, 10**9, integer=True),
    "test_samples": Bound(1, 10**9, integer=True),
    "lr": Bound(0, 100, low_open=True),
    "momentum": Bound(0, 1),
    "weight_decay": Bound(0, 1),
    "label_smoothing": Bound(0, 1),
    "warmup_steps": Bound(0, 1_000_000, integer=True),
    "synthetic_version": Bound(1, 2, integer=True),
    "recipe": Bound(1, 2, integer=True),
    "epoch_eval_samples": Bound(0, 10**9, integer=True),
    "target_accuracy": Bound(0, 1, low_open=True),
    "seed": Bound(0, 2**32 - 1, integer=True),
    "gpus": Bound(1, 1024, integer=True),
    "nproc": Bound(1, 1024, integer=True),
    "cpu_threads": Bound(1, 4096, integer=True),
    "nnodes": Bound(1, 100_000, integer=True),
    "node_rank": Bound(0, 99_999, integer=True),
    "power_limit_w": Bound(0, 10_000, low_open=True, unit=_W),
    "power_limit_fraction": Bound(0, 1, low_open=True),
    "project_after_epochs": Bound(1, 100_000, integer=True),
    "project_after_fraction": Bound(0, 1, low_open=True),  # and < 1 (RunConfig says so)
    "project_after": Bound(0, 100_000, low_open=True),  # deprecated: K epochs, or a fraction
    "run_id": Bound(1, 2**63 - 1, integer=True),
    # measuring
    "interval_s": Bound(0.001, 3600, unit=_S),
    "idle_s": Bound(0, 3600, unit=_S),
    "prometheus_port": Bound(0, 65_535, integer=True),  # 0 = any free port
    "cpu_tdp_w": Bound(0, 10_000, low_open=True, unit=_W),
    "carbon_intensity_kg_per_kwh": Bound(0, 10, unit="kgCO2e/kWh"),
    "pue": Bound(1, 10),
    # the report
    "min_saving": Bound(0, 0.999),
    "max_penalty": Bound(0, 100),
    "baseline_w": Bound(0, 10_000, low_open=True, unit=_W),
    # wattlab compare
    "compare_threshold_percent": Bound(0, 100, low_open=True, unit="%"),
    "compare_confidence": Bound(0.5, 0.999),
    "session_noise_percent": Bound(0, 100, unit="%"),
    # estimates
    "estimate_epochs": Bound(0, 100_000, low_open=True),
    "train_size": Bound(1, 10**9, integer=True),
    "gpu_tdp_w": Bound(0, 10_000, low_open=True, unit=_W),
    "duration_s": Bound(0, 10**8, low_open=True, unit=_S),
    "max_slowdown_percent": Bound(0, 10_000, unit="%"),  # wattlab advise --max-slowdown
    "advise_rows": Bound(1, 10_000, integer=True),  # wattlab advise --rows
    "probe_s": Bound(5.0, 86_400.0, unit=_S),  # wattlab advise --probe: 5 s to a day
    # SLURM (sweep --executor slurm)
    "cpus_per_task": Bound(1, 4096, integer=True),
    "time_limit_min": Bound(1, 525_600, integer=True),  # a year
    "array_parallelism": Bound(1, 100_000, integer=True),
    "slurm_poll_s": Bound(0.1, 3600, unit=_S),
    # the sweep spec
    "repetitions": Bound(1, MAX_SWEEP_RUNS, integer=True),
    "warmup_runs": Bound(0, 100, integer=True),
    "cooldown_s": Bound(0, 86_400, unit=_S),
    "order_seed": Bound(0, 2**63 - 1, integer=True),
}


def check_number(field: str, value: object, where: str, *, spec: bool = False) -> object:
    """Return ``value`` when it lies inside ``BOUNDS[field]``, else raise a ConfigError naming
    ``where`` (a flag such as ``--lr`` or a spec path such as ``grid.lr[2]``). None passes (an
    unset optional value)."""
    if value is None:
        return None
    bound = BOUNDS[field]
    if bound.contains(value):  # type: ignore[arg-type]
        return value
    if spec:
        raise ConfigError(f"{where}: expected {bound.describe()}, got {echo(value)}.")
    raise ConfigError(f"{where} must be {bound.describe()}, got {echo(value)}.")
