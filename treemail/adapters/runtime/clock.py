"""The production clock: wall-clock seconds.

Message expiry counts a message's age across restarts, so its instants are stored; a
monotonic clock restarts with the process and would make stored instants meaningless. A
wall clock stepped back is tolerated by the core (an age never goes below zero).
"""

from __future__ import annotations

import time

__all__ = ["WallClock"]


class WallClock:
    def now(self) -> float:
        return time.time()
