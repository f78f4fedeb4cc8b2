"""The run's progress on rank 0: a rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wattlab.experiment.runs.windows import MonitorWindows
    from wattlab.monitor import EnergyMonitor
    from wattlab.train.config import RunConfig


class RunProgress:
    """A rich progress bar on rank 0: epoch, loss, watts and joules so far (this host)."""

    def __init__(
        self, cfg: RunConfig, monitor: EnergyMonitor, windows: MonitorWindows, enabled: bool
    ) -> None:
        self.cfg = cfg
        self.monitor = monitor
        self.windows = windows
        interactive = sys.stderr.isatty() or bool(os.environ.get("WATTLAB_PROGRESS"))
        self.enabled = enabled and interactive
        self.plain = enabled and not self.enabled
        self.bar: Any = None
        self.task: Any = None
        self.t0 = time.perf_counter()

    def __enter__(self) -> RunProgress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            total = self.cfg.epochs or 1
            self.task = self.bar.add_task(self.cfg.label(), total=total, info="warming up")
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def epoch_done(self, stats: Any) -> None:
        from wattlab.wording import EnergyParts

        epochs = self.windows.epoch_measurements
        energy = sum(m.total_energy_j for m in epochs)
        duration = sum(m.duration_s for m in epochs)
        watts = energy / duration if duration > 0 else 0.0
        parts = sum((m.energy_parts() for m in epochs), EnergyParts())
        info = (
            f"epoch {stats.epoch} loss {stats.train_loss:.3f} "
            f"{watts:.0f} W {energy / 1e3:.2f} kJ ({parts.short()}; rank 0's meters)"
        )
        if self.bar is not None:
            self.bar.update(self.task, completed=stats.epoch, info=info)
        elif self.plain:
            print(f"[{self.cfg.label()}] {info}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text)
        elif self.plain:
            print(text, file=sys.stderr, flush=True)
