"""The measuring core above the meters: named energy windows (``EnergyMonitor``, ``Measurement``),
their CO2e (``carbon``) and a Prometheus endpoint over a running monitor (``prometheus``).

- ``energy_monitor``: EnergyMonitor (lifecycle, windows, idle baseline, the ``measure`` decorator);
- ``windows``: one window's arithmetic (edge readings, energy, provenance, uncertainty);
- ``sampler``: the background sampler (power trace, utilisation readings);
- ``measurement``: Measurement, the result of a window, and ``combine_measurements``;
- ``clock``: UTC time stamps and the wait for queued accelerator work;
- ``carbon``: energy -> CO2e with an intensity range and PUE;
- ``prometheus``: the scrape endpoint (``wattlab[prometheus]``), imported only when asked for.

It imports only ``wattlab.meters`` and base utilities, and loads no torch.
"""

from wattlab.monitor.clock import cuda_sync_if_in_use, utc_now_iso
from wattlab.monitor.energy_monitor import (
    DEFAULT_INTERVAL_S,
    DEFAULT_UTILIZATION_INTERVAL_S,
    EnergyMonitor,
    WindowHandle,
)
from wattlab.monitor.measurement import Measurement, combine_measurements

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_UTILIZATION_INTERVAL_S",
    "EnergyMonitor",
    "Measurement",
    "WindowHandle",
    "combine_measurements",
    "cuda_sync_if_in_use",
    "utc_now_iso",
]
