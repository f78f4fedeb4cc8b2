"""The measurement settings `run`, `sweep` and `monitor` share, checked once.

Each of the three commands takes the same measuring flags (``--interval``, the carbon flags,
``--powercap-root``, ``--cpu-tdp``, ``--cpu-load``, ``--ram-measure``), each declared once as an
``Annotated`` alias in ``cli.options``, under the parameter names of ``PARAMETERS`` and with the
defaults here; `estimate` and `advise` take the carbon ones (``CARBON_PARAMETERS``).
``MeasurementFlags.from_params(ctx.params)`` gathers their parsed values, and ``settings()``
checks them together and turns them into what the library takes: a ``CarbonSettings`` whose
intensity trace covers the present, an existing powercap root, and, for ``--mlflow``, an
installed MLflow with a reachable tracking store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattlab.errors import WattlabError

if TYPE_CHECKING:
    from wattlab.experiment.options import WorkerOptions
    from wattlab.monitor.carbon import CarbonSettings

INTERVAL_S = 0.1  # --interval's default: the sampling period in seconds
RAM_MEASURE = "system"  # --ram-measure's default
CPU_LOAD = "machine"  # --cpu-load's default
# MeasurementFlags field -> the command's parameter (its flag is that name with dashes)
PARAMETERS = {
    "interval_s": "interval",
    "carbon_intensity": "carbon_intensity",
    "intensity_range": "intensity_range",
    "pue": "pue",
    "powercap_root": "powercap_root",
    "cpu_tdp_w": "cpu_tdp",
    "ram_measure": "ram_measure",
    "cpu_load": "cpu_load",
    "region": "region",
    "intensity_trace": "intensity_trace",
}
# the ones of a command that only predicts (`estimate`, `advise`): what CO2e a kWh stands for
CARBON_PARAMETERS = ("carbon_intensity", "intensity_range", "pue")


def powercap_root(value: str | None) -> Path | None:
    """--powercap-root, else $WATTLAB_POWERCAP_ROOT; empty counts as unset (never the cwd)."""
    root = value or os.environ.get("WATTLAB_POWERCAP_ROOT") or None
    if root is None:
        return None
    path = Path(root)
    if not path.is_dir():
        raise WattlabError(f"the powercap root {root} does not exist or is not a folder.")
    return path


@dataclass(frozen=True)
class MeasurementSettings:
    """The checked settings of one measuring command."""

    carbon: CarbonSettings
    interval_s: float
    powercap_root: Path | None
    cpu_tdp_w: float | None
    ram_measure: str
    cpu_load: str = CPU_LOAD

    @property
    def powercap_root_text(self) -> str | None:
        """The powercap root as the worker's settings hold it (a string, or None)."""
        return str(self.powercap_root) if self.powercap_root else None

    def worker_options(
        self, db: str, *, progress: bool, codecarbon_country: str = "USA"
    ) -> WorkerOptions:
        """The worker's settings for runs stored in ``db`` and measured with these settings."""
        from wattlab.experiment.options import WorkerOptions

        return WorkerOptions(
            db_path=db,
            carbon=self.carbon,
            interval_s=self.interval_s,
            powercap_root=self.powercap_root_text,
            cpu_tdp_w=self.cpu_tdp_w,
            ram_measure=self.ram_measure,
            cpu_load=self.cpu_load,
            progress=progress,
            codecarbon_country=codecarbon_country,
        )


@dataclass(frozen=True)
class MeasurementFlags:
    """The parsed values of the measuring flags (--interval and the numbers were bounded, the
    intensity range parsed, while the command line was parsed)."""

    interval_s: float = INTERVAL_S
    carbon_intensity: float | None = None
    intensity_range: str | None = None
    pue: float | None = None
    powercap_root: str | None = None
    cpu_tdp_w: float | None = None
    ram_measure: str = RAM_MEASURE
    cpu_load: str = CPU_LOAD
    region: str | None = None
    intensity_trace: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> MeasurementFlags:
        """The measuring flags among a command's parsed parameters (``ctx.params``); a flag
        the command does not take keeps its default (`estimate` takes only the carbon ones)."""
        return cls(**{field: params[name] for field, name in PARAMETERS.items() if name in params})

    def carbon(self) -> CarbonSettings:
        """The carbon flags as the library's ``CarbonSettings`` (a WattlabError naming the
        flag when they do not fit together)."""
        from wattlab.monitor.carbon import settings_from_flags

        return settings_from_flags(
            self.carbon_intensity, self.intensity_range, self.pue, self.region, self.intensity_trace
        )

    def settings(self, *, mlflow: bool = False) -> MeasurementSettings:
        """Check the flags together, before anything runs: the carbon intensity (a trace must
        cover the present: a live measurement), MLflow when ``mlflow`` (the extra and the
        tracking store), then the powercap root. Raises a WattlabError naming the flag."""
        carbon = self.carbon()
        if carbon.trace is not None:  # a live measurement: the trace must cover the present
            carbon.trace.check_covers_now()
        if mlflow:  # say which extra is missing before anything runs
            from wattlab.integrations.mlflow import _mlflow, check_tracking_uri

            _mlflow()
            check_tracking_uri()  # a closed port or a missing folder: one sentence, now
        return MeasurementSettings(
            carbon=carbon,
            interval_s=self.interval_s,
            powercap_root=powercap_root(self.powercap_root),
            cpu_tdp_w=self.cpu_tdp_w,
            ram_measure=self.ram_measure,
            cpu_load=self.cpu_load,
        )


def resolve_device(device: str | None) -> str:
    """``--device``: as given, or for None/"auto" a CUDA GPU when torch sees one, else the CPU."""
    if device not in (None, "auto"):
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
