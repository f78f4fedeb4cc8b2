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

__all__ = [
    "CarbonSettings",
    "EnergyMonitor",
    "Measurement",
    "Provenance",
    "WattlabError",
    "budget",
    "co2e",
    "combine_measurements",
]
__version__ = "0.1.0"
