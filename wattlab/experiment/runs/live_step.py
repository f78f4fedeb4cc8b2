"""STEP while the run trains: a projection from epochs (``--project-after`` N >= 1) or from
step-level marks (a fraction < 1, single process), noted as soon as it is made."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wattlab.monitor import combine_measurements

if TYPE_CHECKING:
    from wattlab.experiment.runs.progress import RunProgress
    from wattlab.experiment.runs.windows import MonitorWindows
    from wattlab.monitor import EnergyMonitor
    from wattlab.train.config import RunConfig

Note = Callable[[str], None]


class LiveMarks:
    """STEP from step-level marks (``--project-after`` a fraction): at each mark, the clock and
    the meters' cumulative energy since the budget began (single process only)."""

    def __init__(self, fraction: float, monitor: EnergyMonitor, note: Note) -> None:
        from wattlab.step.marks import MarkProjector

        self.projector = MarkProjector(fraction)
        self.monitor = monitor
        self.note = note
        self.calibration = step_calibration(note)  # read now, not inside the budget window
        self.projection: Any = None
        self.origin: tuple[float, float] | None = None

    def _energy_j(self) -> float:
        return sum(
            float(m.energy_j()) for m in self.monitor.meters if m.info.details.get("in_total", True)
        )

    def marks(self) -> dict[str, list[float]]:
        """Every mark of the budget (samples done; s and J since the budget began), so STEP
        can be re-run and judged later at any fraction (``runs.step_marks_json``)."""
        p = self.projector
        return {
            "samples": list(p.samples),
            "time_s": list(p.times_s),
            "energy_j": list(p.energies_j),
        }

    def mark(self, samples_done: int, budget_samples: int) -> None:
        now, energy = time.perf_counter(), self._energy_j()
        if self.origin is None or samples_done == 0:
            self.origin = (now, energy)
        t0, e0 = self.origin
        result = self.projector.add_mark(samples_done, budget_samples, now - t0, energy - e0)
        if result is not None:
            result = result.with_interval(self.calibration)
            self.projection = result
            self.note(result.describe())


class LiveEpochs:
    """STEP from whole epochs (``--project-after`` N >= 1): projects once, after epoch N."""

    def __init__(self, total_epochs: int, project_after: int) -> None:
        from wattlab.step.epochs import StepProjector

        self.projector = StepProjector(total_epochs, project_after=project_after)
        self.projection: Any = None


def step_calibration(note: Note) -> Any:
    """The shipped STEP calibration (wattlab/data/step-calibration.csv), or None with a note
    saying why the projection has only its band."""
    from wattlab.errors import DataError
    from wattlab.step.calibration import load_step_calibration

    try:
        return load_step_calibration()
    except DataError as exc:
        note(f"STEP: no calibrated interval ({exc})")
        return None


def make_projector(
    cfg: RunConfig, monitor: Any = None, note: Note | None = None
) -> LiveMarks | LiveEpochs | None:
    """The run's live STEP projector, or None when the run projects nothing."""
    if cfg.project_after_fraction is not None:
        return LiveMarks(cfg.project_after_fraction, monitor, note or (lambda text: None))
    if cfg.project_after_epochs is None or cfg.epochs is None:
        return None
    return LiveEpochs(cfg.epochs, cfg.project_after_epochs)


def on_epoch(
    stats: Any,
    windows: MonitorWindows,
    live: LiveMarks | LiveEpochs | None,
    progress: RunProgress,
    dist: Any,
) -> None:
    """After each epoch: the progress line, and (projecting by epochs) STEP's projection."""
    progress.epoch_done(stats)
    if not isinstance(live, LiveEpochs) or not windows.epoch_measurements:
        return
    from wattlab.train.distributed import gather_objects

    last = windows.epoch_measurements[-1]
    parts = gather_objects(last, dist)  # a collective: every rank takes part
    if not dist.is_main or parts is None:
        return
    epoch = combine_measurements(parts)
    projection = live.projector.add_epoch(epoch.total_energy_j, epoch.duration_s)
    if projection is not None and live.projection is None:
        live.projection = projection
        progress.note(
            f"STEP after epoch {len(windows.epoch_measurements)}: {projection.describe()}"
        )
