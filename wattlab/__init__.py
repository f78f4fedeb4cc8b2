"""wattlab: measure, compare and predict the energy, time and CO2e of deep-learning training.

Importing wattlab starts nothing: no NVML session, no thread, no network call.
"""

from wattlab.errors import WattlabError
from wattlab.meters.base import Provenance
from wattlab.monitor import EnergyMonitor, Measurement, combine_measurements
from wattlab.monitor.carbon import CarbonSettings, co2e

__all__ = [
    "CarbonSettings",
    "EnergyMonitor",
    "Measurement",
    "Provenance",
    "WattlabError",
    "co2e",
    "combine_measurements",
]
__version__ = "0.1.0"
