"""wattlab: measure, compare and predict the energy, time and CO2e of deep-learning training.

Importing wattlab starts nothing: no NVML session, no thread, no network call (and changes no
signal handler, except in the `wattlab` command itself: see ``wattlab.stop_signals``).
"""

from wattlab import stop_signals as _stop_signals

if _stop_signals.is_the_command():  # first thing: Ctrl-C during the imports is one line too
    _stop_signals.install(at_start_up=True)

from wattlab.budget_marks import budget  # noqa: E402
from wattlab.errors import WattlabError  # noqa: E402
from wattlab.meters.base import Provenance  # noqa: E402
from wattlab.monitor import EnergyMonitor, Measurement, combine_measurements  # noqa: E402
from wattlab.monitor.carbon import CarbonSettings, co2e  # noqa: E402

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
