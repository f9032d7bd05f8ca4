"""What an actor does when its model keeps failing: back off, then give up until new input.

A model call that fails aborts its request (the claimed mail is released) and interrupts the
run. While fewer than ``limit`` consecutive calls have failed, the session is queued again and
its next run starts after a back-off that doubles each time, up to ``cap`` seconds. At the
limit the actor gives up: the run is interrupted with the reason in the log, the session goes
idle with its mail kept, a delegated session tells its parent, and only new input wakes it. A
model that always fails is thus tried ``limit`` times per input, never forever.

``sleep`` is injected so tests can count the back-offs instead of waiting for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import attrs

__all__ = ["FailurePolicy", "Sleep"]

Sleep = Callable[[float], Awaitable[None]]


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


@attrs.frozen
class FailurePolicy:
    """Back-off and give-up rule for consecutive model failures of one session."""

    limit: int = attrs.field(default=3, validator=_positive)
    base: float = 0.05
    cap: float = 2.0
    sleep: Sleep = asyncio.sleep

    def delay(self, failures: int) -> float:
        """Seconds to wait before the next run after ``failures`` consecutive failures."""
        return 0.0 if failures <= 0 else min(self.base * 2 ** failures, self.cap)

    def exhausted(self, failures: int) -> bool:
        """Whether ``failures`` consecutive failures mean: stop retrying until new input."""
        return failures >= self.limit

    async def back_off(self, failures: int) -> None:
        if failures > 0:
            await self.sleep(self.delay(failures))

    def reason(self, failures: int, code: str) -> str:
        """The interruption reason recorded in the log (and sent to a delegating parent)."""
        if self.exhausted(failures):
            return (f"model failed {failures} times in a row ({code}); stopped until new "
                    "input arrives")
        return f"model error: {code}"
