"""The TUI folds the live events that have reached its client in batches, and shows each batch
once: a TUI that fell behind its feed under load took one screen update per event to catch
up (60 events that reached its client within 4 s took 10 to 37 s to fold at a load of 25).
Batches change when the screen is drawn, never what it shows: folding a burst in one batch
leaves the screen, every pane's rows and the events behind each row exactly as folding it
event by event does."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual.widgets import DataTable, Static, Tree
from textual.widgets.tree import TreeNode

from tests.tui.conftest import until
from tests.tui.piped import Piped, traffic
from treemail.adapters.ui.tui import sources
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.screenshot import screen_text
from treemail.core.records import Event

FEED = traffic(3)  # 196 events: four sessions' runs, requests and mail in every state
assert 150 < len(FEED) <= sources.BATCH


class Held(Piped):
    """Its batches wait until the test lets them go, so a whole burst is at the client first."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def batches(self) -> AsyncIterator[list[tuple[int, Event]]]:
        await self.gate.wait()
        async for batch in super().batches():
            yield batch


def shown(app: TreemailTui) -> dict[str, Any]:
    """Everything the TUI shows of what it folded, and the events behind each row."""
    table = app.query_one("#transcript", DataTable)

    def tree(node: TreeNode[str]) -> list[Any]:
        return [(str(child.label), tree(child)) for child in node.children]

    return {
        "screen": screen_text(app),
        "sessions": tree(app.query_one("#sessions", Tree).root),
        "transcript": [[str(cell) for cell in table.get_row_at(i)]
                       for i in range(table.row_count)],
        "cursor": table.cursor_row,
        "status": str(app.query_one("#status", Static).render()),
        "events": {key: list(got) for key, got in app.board.sources.items()},
        "folded": (app.board.folded, app.board.last),
    }


async def burst(chunks: list[int]) -> tuple[dict[str, Any], int]:
    """``FEED`` sent to a TUI in ``chunks`` (sizes); each chunk is written once the TUI has
    folded the one before. A single chunk is held back until all of it reached the client.
    What the TUI shows then, and in how many batches it folded it."""
    source = Held()
    app = TreemailTui(source)
    async with app.run_test(size=(150, 40)) as pilot:
        await until(app.ready.is_set, pilot.pause, "the (empty) history read")
        assert source.client is not None
        queue, sent = source.client.notifications, 0
        for size in chunks:
            await source.send(FEED[sent:sent + size])
            sent += size

            def queued(n: int = size) -> bool:
                return queue.qsize() == n

            def folded(n: int = sent) -> bool:
                return app.board.folded == n

            if not source.gate.is_set():
                await until(queued, pilot.pause, "the chunk queued", progress=queue.qsize)
                source.gate.set()
            await until(folded, lambda: asyncio.sleep(0.002), "the chunk folded",
                        progress=lambda: app.board.folded)
        await pilot.pause()
        return shown(app), app.batches


@functools.cache
def one_by_one() -> dict[str, Any]:
    """The reference: ``FEED`` folded and shown event by event, as before batches."""
    reference, each = asyncio.run(burst([1] * len(FEED)))
    assert each == len(FEED)
    return reference


def test_a_burst_at_the_client_folds_in_one_batch_and_shows_as_event_by_event() -> None:
    whole, batches = asyncio.run(burst([len(FEED)]))
    assert batches == 1  # one screen update for the burst, not one per event
    assert whole == one_by_one()
    assert whole["folded"] == (len(FEED), FEED[-1][0])
    # Every event is behind a row but the requests' (24 begun, 24 committed: no row).
    assert sum(map(len, whole["events"].values())) == len(FEED) - 48
    assert len(whole["transcript"]) == len(whole["events"]) > 60


def test_bursts_of_any_size_show_as_event_by_event() -> None:
    rng = random.Random(24)
    sizes: list[int] = []
    while sum(sizes) < len(FEED):
        sizes.append(min(rng.randint(1, 40), len(FEED) - sum(sizes)))
    mixed, batches = asyncio.run(burst(sizes))
    assert len(sizes) <= batches < len(FEED)
    assert mixed == one_by_one()


def test_a_backlog_longer_than_a_batch_folds_in_bounded_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between batches keys are read and the screen drawn: a long backlog is not one fold."""
    monkeypatch.setattr(sources, "BATCH", 50)
    whole, batches = asyncio.run(burst([len(FEED)]))
    assert batches == -(-len(FEED) // 50)
    assert whole == one_by_one()
