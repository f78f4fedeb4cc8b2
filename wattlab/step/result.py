"""What STEP's epoch and step-level projections share: the status words, the error against a
measured total, and a plain dict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from wattlab.errors import DataError

# a series of numbers, as a list or an array (the STEP rules read either through np.asarray)
Floats = Sequence[float] | npt.NDArray[np.floating[Any]]

STABLE = "projected"
NOT_STABLE = "not stable"


class Projected:
    """What both projections share: whether they projected, their error against a measured
    total, and a plain dict. (Subclasses are dataclasses with ``status`` and ``energy_j``.)"""

    status: str
    energy_j: float | None

    @property
    def ok(self) -> bool:
        return self.status == STABLE

    def relative_error(self, measured_total_j: float) -> float | None:
        """(projected - measured) / measured; None when nothing was projected."""
        if not self.ok or self.energy_j is None:
            return None
        if not measured_total_j > 0:
            raise DataError(
                f"the measured total must be a positive energy in J, got {measured_total_j!r}."
            )
        return (self.energy_j - measured_total_j) / measured_total_j

    def to_dict(self) -> dict[str, object]:
        if not is_dataclass(self) or isinstance(self, type):  # every subclass is a dataclass
            raise TypeError(f"{type(self).__name__} is not a dataclass")
        return asdict(self)
