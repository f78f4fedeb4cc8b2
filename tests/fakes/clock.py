"""A controllable monotonic clock for meters and fakes."""

from __future__ import annotations


class FakeClock:
    """A controllable monotonic clock (s); pass ``clock`` to meters and to the fakes."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt
