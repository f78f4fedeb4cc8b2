"""The training loop's window hooks, backed by an EnergyMonitor, and what one rank sends rank 0."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wattlab.experiment.db.record import CODECARBON_WINDOW
from wattlab.experiment.hosts import host_name, qualified, qualify_measurement
from wattlab.monitor import EnergyMonitor, Measurement

if TYPE_CHECKING:
    from wattlab.experiment.runs.codecarbon_window import CodeCarbon


def window_key(name: str, epoch: int | None) -> str:
    return f"{name}:{epoch}" if epoch is not None else name


class MonitorWindows:
    """The training loop's WindowHooks, backed by an EnergyMonitor.

    With CodeCarbon, its tracker starts before the ``budget`` window opens and stops after it
    closes, so its start-up and shut-down never land in a measured window; a ``codecarbon``
    window opened right after ``start()`` returns and closed right before ``stop()`` is what
    CodeCarbon is compared with. Every rank opens it (the tracker runs on rank 0 only and reads
    the whole machine), so the combined window covers every GPU.
    """

    def __init__(
        self,
        monitor: EnergyMonitor,
        codecarbon: CodeCarbon | None = None,
        codecarbon_window: bool | None = None,
        host: str | None = None,
    ) -> None:
        self.monitor = monitor
        self.codecarbon = codecarbon
        self.host = host  # set on multi-node runs: component names carry it (node-a/gpu:0)
        self.codecarbon_window = (
            codecarbon is not None if codecarbon_window is None else codecarbon_window
        )
        self.results: dict[str, Measurement] = {}
        self.samples: dict[str, int] = {}
        self.epoch_measurements: list[Measurement] = []

    def begin(self, name: str, epoch: int | None = None) -> None:
        if name == "budget" and self.codecarbon_window:
            if self.codecarbon is not None:
                self.codecarbon.start()
            self.monitor.begin_window(CODECARBON_WINDOW)
        self.monitor.begin_window(window_key(name, epoch))

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
        key = window_key(name, epoch)
        result = self._qualified(self.monitor.end_window(key))
        self.results[key] = result
        self.samples[key] = samples
        if name == "budget" and self.codecarbon_window:
            cc_window = self.monitor.end_window(CODECARBON_WINDOW)
            self.results[CODECARBON_WINDOW] = self._qualified(cc_window)
            self.samples[CODECARBON_WINDOW] = samples
            if self.codecarbon is not None:
                self.codecarbon.stop()
        if name == "epoch":
            self.epoch_measurements.append(result)

    def _qualified(self, measurement: Measurement) -> Measurement:
        """On a multi-node run, every component name carries this host."""
        return measurement if self.host is None else qualify_measurement(measurement, self.host)


def local_payload(windows: MonitorWindows, monitor: EnergyMonitor) -> dict[str, Any]:
    """This rank's windows, meters, trace and discovery problems, for rank 0 to combine."""
    infos = [
        {"component": m.info.component, "details": dict(m.info.details)} for m in monitor.meters
    ]
    trace = list(monitor.trace)
    if windows.host is not None:
        trace = [(t, qualified(windows.host, c), w) for t, c, w in trace]
    return {
        "hostname": host_name(),
        "results": windows.results,
        "samples": windows.samples,
        "meters": infos,
        "trace": trace,
        "problems": [p.__dict__ for p in (monitor.discovery.problems if monitor.discovery else [])],
    }
