"""The TUI tests' waits fail: on a stall (nothing moved for ``stall`` seconds), and at
``LIMIT`` however much moves, each saying what it waited for."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.tui import conftest
from tests.tui.conftest import Recorder, until


def test_a_wait_on_something_that_never_moves_fails_after_its_stall() -> None:
    async def scenario() -> None:
        await until(lambda: False, lambda: asyncio.sleep(0.01), "the never", stall=0.2,
                    progress=lambda: 0)

    with pytest.raises(AssertionError, match=r"waiting for the never: nothing moved"):
        asyncio.run(scenario())


def test_a_wait_that_keeps_moving_goes_on_past_its_stall_and_ends_when_it_holds() -> None:
    seen: list[int] = []

    def tick() -> int:
        seen.append(len(seen))
        return len(seen)

    async def scenario() -> None:
        # Each look moves the progress; the condition holds only after several stalls' time.
        await until(lambda: len(seen) > 30, lambda: asyncio.sleep(0.02), "thirty ticks",
                    stall=0.1, progress=tick)

    asyncio.run(scenario())
    assert len(seen) > 30


def test_a_wait_that_keeps_moving_fails_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "LIMIT", 0.3)
    ticks = itertools.count()

    async def scenario() -> None:
        await until(lambda: False, lambda: asyncio.sleep(0.01), "the never", stall=10,
                    progress=lambda: next(ticks))

    with pytest.raises(AssertionError, match=r"waiting for the never: still moving"):
        asyncio.run(scenario())


def test_a_recorder_that_records_nothing_fails_after_its_stall() -> None:
    async def scenario() -> None:
        await Recorder().until(lambda _: True, stall=0.2)

    with pytest.raises(AssertionError, match=r"waiting for a recorded event: nothing moved"):
        asyncio.run(scenario())
