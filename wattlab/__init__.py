"""wattlab: measure, compare and predict the energy, time and CO2e of deep-learning training.

Importing wattlab starts nothing: no NVML session, no thread, no network call (and changes no
signal handler, except in the `wattlab` command itself: see ``wattlab.stop_signals``).
"""

import _signal as _first_signal  # type: ignore[import-not-found]  # noqa: I001  # first of all
import sys as _first_sys


def _leave_at_once(signum: int, _frame: object) -> None:
    """The very first moments of the `wattlab` command (nothing has started): one line, exit."""
    import os

    line = "wattlab: interrupted\n" if signum == 2 else f"wattlab: stopped by signal {signum}\n"
    try:
        os.write(2, line.encode())
    finally:
        os._exit(128 + signum)


_before_us: dict[int, object] = {}
if "wattlab.cli" in list(getattr(_first_sys, "orig_argv", ()))[1:4] or (
    _first_sys.argv and _first_sys.argv[0].rsplit("/", 1)[-1] == "wattlab"
):  # a quick look; stop_signals.is_the_command decides just below
    for _name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(_first_signal, _name):
            _signum = getattr(_first_signal, _name)
            _before_us[_signum] = _first_signal.signal(_signum, _leave_at_once)

from wattlab import stop_signals as _stop_signals  # noqa: E402

if _stop_signals.is_the_command():  # first thing: Ctrl-C during the imports is one line too
    _stop_signals.install(at_start_up=True)
else:  # imported as a library: every handler as it was
    for _signum, _handler in _before_us.items():
        _first_signal.signal(_signum, _handler)

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
__version__ = "0.2.0"


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wattlab' has no attribute {name!r}")
