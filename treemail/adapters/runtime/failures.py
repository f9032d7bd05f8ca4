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

from treemail.adapters.runtime.model_errors import ModelError
from treemail.core.events import Fault

__all__ = ["FailurePolicy", "Sleep", "describe", "fault_of"]

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

    def reason(self, failures: int, error: ModelError) -> str:
        """The interruption reason recorded in the log (and sent to a delegating parent):
        what failed, where, and what to check, never just the error's code."""
        cause = describe(error)
        if self.exhausted(failures):
            return (f"model failed {failures} times in a row ({cause}); stopped until new "
                    "input arrives")
        return f"model error: {cause}"


def fault_of(error: ModelError) -> Fault:
    """The structured part of a model failure, recorded beside the reason."""
    status, url, hint = (error.details.get(key) for key in ("status", "url", "hint"))
    return Fault(status if isinstance(status, int) else None,
                 url if isinstance(url, str) else None,
                 hint if isinstance(hint, str) else None)


def describe(error: ModelError) -> str:
    """One line: ``HTTP 401 from URL: hint`` when the server answered, ``no answer from URL:
    hint`` when it did not, else the error's code and message."""
    fault = fault_of(error)
    if fault.status is not None:
        head = f"HTTP {fault.status}" + (f" from {fault.endpoint}" if fault.endpoint else "")
    else:
        head = f"no answer from {fault.endpoint}" if fault.endpoint else error.code
    tail = fault.hint or error.message
    text = f"{head}: {tail}"
    return text if len(text) <= _REASON else text[:_REASON] + "..."


_REASON = 400  # a reason is a line in a feed row and a parent's mail, not an error body
