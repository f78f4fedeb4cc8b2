"""What the epoch-based STEP rules (wattlab's and the published one) read of a stored run: its
epochs' energies of the target and durations, and the power-based twin they share."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.estimate.methods.base import StoredRuns, value_of

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


@dataclass(frozen=True)
class EpochSeries:
    """One run's measured epochs, in order. Units: J, s."""

    total_epochs: float  # the epochs of its budget
    energies_j: np.ndarray  # the target's energy per measured epoch
    durations_s: np.ndarray
    rows: pd.DataFrame  # its epoch windows, sorted by epoch


def _series(stored: StoredRuns, run: dict[str, Any]) -> EpochSeries | str:
    import pandas as pd

    total_epochs = value_of(run, "epochs")
    if total_epochs is None or not float(total_epochs) > 0:
        return "the run recorded no epoch count"
    epochs = stored.run_epochs(run[stored.id_column])
    if epochs.empty:
        return "the run has no epoch windows"
    columns = stored.columns
    missing = [c for c in columns if c not in epochs]
    if missing:
        return f"its epoch windows lack {', '.join(missing)}, the target's per-epoch energy"
    rows = epochs.sort_values("epoch")
    values = rows[list(columns)].apply(pd.to_numeric, errors="coerce")
    if values.isna().any().any():
        return f"some of its epoch windows have no {' + '.join(columns)}"
    return EpochSeries(
        float(total_epochs),
        values.sum(axis=1).to_numpy(dtype=float),
        rows["duration_s"].to_numpy(dtype=float),
        rows,
    )


def epoch_series(stored: StoredRuns) -> dict[Hashable, tuple[dict[str, Any], EpochSeries | str]]:
    """Each stored run (as a dict) and its epochs, or why it has none to project from; made
    once per evaluation, by runs index."""
    return stored.once(
        "epoch-series", lambda: {i: (run, _series(stored, run)) for i, run in stored.each()}
    )


def power_twin(method: str, run: dict[str, Any], window_power_w: float, where: str) -> Estimate:
    """The paper's formula: the window's mean power x the run's measured duration."""
    duration_s = value_of(run, "duration_s")
    if duration_s is None or not float(duration_s) > 0:
        return cannot_apply(method, "the run has no measured duration")
    return made(
        method,
        window_power_w * float(duration_s),
        float(duration_s),
        f"window mean power {window_power_w:.0f} W x measured duration {float(duration_s):.0f} s "
        f"(the paper's formula); {where}",
    )


def twins(
    stored: StoredRuns,
    key: str,
    names: tuple[str, str],
    project: Callable[[dict[str, Any], EpochSeries], tuple[Estimate, Estimate]],
) -> dict[Hashable, tuple[Estimate, Estimate]]:
    """A rule's estimate and its power-based twin's, of each stored run (made once per
    evaluation under ``key``): ``project(run, series)`` for a run with epochs, else both
    ``cannot_apply`` with the same reason."""

    def make() -> dict[Hashable, tuple[Estimate, Estimate]]:
        out: dict[Hashable, tuple[Estimate, Estimate]] = {}
        for index, (run, series) in epoch_series(stored).items():
            if isinstance(series, str):
                out[index] = (cannot_apply(names[0], series), cannot_apply(names[1], series))
            else:
                out[index] = project(run, series)
        return out

    return stored.once(key, make)


__all__ = ["EpochSeries", "epoch_series", "power_twin", "twins"]
