"""What STEP's epoch and step-level projections share: the status words, the error against a
measured total, and a plain dict."""

from __future__ import annotations

from dataclasses import asdict

from wattlab.errors import DataError

STABLE = "projected"
NOT_STABLE = "not stable"


class Projected:
    """What both projections share: their error against a measured total, and a plain dict.
    (Subclasses are dataclasses with ``ok`` and ``energy_j``.)"""

    ok: bool
    energy_j: float | None

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
        return asdict(self)
