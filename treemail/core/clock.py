"""Time, as a port: the core reads no clock of its own.

Only message expiry needs time. The engine asks its ``Clock`` for the current instant and
hands it down as a plain number, so every decision that depends on time is a function of
that number: the daemon passes the wall clock (it must survive restarts, which a monotonic
clock does not), tests and the model checker a ``ManualClock`` they move by hand.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Clock", "ManualClock"]


class Clock(Protocol):
    """The current instant, in seconds."""

    def now(self) -> float: ...


class ManualClock:
    """A clock that moves only when told: deterministic time for tests and the checker."""

    def __init__(self, start: float = 0.0) -> None:
        self.at = float(start)

    def now(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds
