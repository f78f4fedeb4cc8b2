"""wattlab: measure, compare and predict the energy, time and CO2e of deep-learning training.

Importing wattlab starts nothing: no NVML session, no thread, no network call.
"""

from wattlab.budget_marks import budget
from wattlab.errors import WattlabError
from wattlab.meters.base import Provenance
from wattlab.monitor import EnergyMonitor, Measurement, combine_measurements
from wattlab.monitor.carbon import CarbonSettings, co2e

# names loaded on first use (PEP 562): the advisor sits in the estimate layer, and importing
# wattlab must load no pandas, torch or PRE
_LAZY = {"advise": "wattlab.estimate.advise.api"}

__all__ = [
    "CarbonSettings",
    "EnergyMonitor",
    "Measurement",
    "Provenance",
    "WattlabError",
    "advise",
    "budget",
    "co2e",
    "combine_measurements",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wattlab' has no attribute {name!r}")
