"""Opening on a history: the TUI shows the sessions as they are now before it has read any of
the history, and the history it reads in pages, newest first, leaves the transcript exactly
as folding the whole feed in order does, whatever the page size; over a real daemon too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.daemon.conftest import DaemonProcess, quiet
from tests.tui.conftest import until
from tests.tui.test_pilot import (
    _tree,
    daemon,  # noqa: F401 - the same daemon, one per module
)
from tests.tui.test_replay import demo_store  # noqa: F401 - the demo's store, one per module
from tests.unit.conftest import World
from treemail.adapters.store.factory import open_store
from treemail.adapters.ui.tui import sources
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.board import Board, SessionLine
from treemail.adapters.ui.tui.feed import event_of, stored_feed
from treemail.adapters.ui.tui.sources import LiveSource, StoreSource
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import Event
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_READ, RUN_SUBMIT


def _paged(feed: list[tuple[int, Event]], lines: list[SessionLine], size: int) -> Board:
    """A board that opened at the feed's end and read its history ``size`` events a page,
    newest page first."""
    board = Board()
    board.start(lines, feed[-1][0])
    for end in range(len(feed), 0, -size):
        board.older(feed[max(0, end - size):end])
    board.finish()
    return board


def _every_state() -> list[tuple[int, Event]]:
    """A feed whose mail ends in every state a row shows: consumed, discarded with a
    reason, and pending (accepted, and claimed by a request still open)."""
    world = World(MemoryStore())
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    world.send(root, kid, "first, consumed")
    world.consume_all(kid)
    dropped = world.send(root, kid, "second, discarded")
    world.engine.discard(dropped.message_id, "the user dropped it")
    world.send(kid, root, "third, left pending")
    world.send(root, kid, "fourth, claimed")
    run = world.activate(kid)
    world.engine.begin_request(kid.session_id, run.run_id)
    return list(world.engine.feed())


@pytest.mark.parametrize("size", [1, 2, 3, 7, 40, 256])
@pytest.mark.parametrize("which", ["demo", "every state"])
def test_history_read_newest_first_folds_as_the_feed_in_order(
    demo_store: Path, size: int, which: str  # noqa: F811 - the fixture imported above
) -> None:
    feed = stored_feed(demo_store) if which == "demo" else _every_state()
    whole = Board()
    whole.extend(feed)
    lines = [SessionLine(s.session_id, s.parent, s.handle, s.agent)
             for s in whole.sessions.values()]
    paged = _paged(feed, lines, size)
    assert paged.transcript.rows() == whole.transcript.rows()
    assert paged.sources == whole.sources
    assert paged.folded == whole.folded == len(feed)
    assert {sid: s.pending for sid, s in paged.sessions.items()} == {
        sid: s.pending for sid, s in whole.sessions.items()}
    if which != "demo":
        states = {row.state for row in whole.transcript.rows()}
        assert {MessageState.CONSUMED, MessageState.DISCARDED, MessageState.ACCEPTED,
                MessageState.CLAIMED} <= states, states
        assert any(row.text.endswith("— the user dropped it")
                   for row in paged.transcript.rows())


class Gated(StoreSource):
    """A replay whose history waits until the test lets it go."""

    def __init__(self, store_dir: Path) -> None:
        super().__init__(store_dir)
        self.gate = asyncio.Event()

    async def history(self, head: int) -> AsyncIterator[list[tuple[int, Event]]]:
        await self.gate.wait()
        async for page in super().history(head):
            yield page


def test_the_tree_shows_current_states_before_any_history(
    demo_store: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811 - the fixture above
) -> None:
    monkeypatch.setattr(sources, "PAGE", 16)  # several pages, newest first
    store = open_store(demo_store, readonly=True)
    with store.read() as tx:
        stored = {s.session_id: s.state.value for s in tx.sessions()}
        head = tx.feed_end()
    store.close()

    async def scenario() -> tuple[dict[str, str], str, list[str], str, list[str]]:
        source = Gated(demo_store)
        app = TreemailTui(source)
        async with app.run_test(size=(150, 40)) as pilot:
            await until(lambda: len(app.nodes) == len(stored), pilot.pause, "the snapshot")
            shown = {sid: line.shown_state() for sid, line in app.board.sessions.items()}
            labels = [str(node.label) for node in app.nodes.values()]
            before = str(app.query_one("#status", Static).render())
            assert not app.opened.is_set()
            source.gate.set()
            await until(app.ready.is_set, pilot.pause, "the history read")
            after = [str(node.label) for node in app.nodes.values()]
            return shown, before, labels, str(app.query_one("#status", Static).render()), after

    shown, before, labels, status, after = asyncio.run(scenario())
    assert shown == stored and SessionState.FINISHED in stored.values()  # not idle, as at creation
    assert all(state in label for label, state in zip(labels, stored.values(), strict=True))
    assert f"(history 0 of {head:,}…)" in before, before
    assert "✉ …" in labels[0] and "✉ …" not in " ".join(after)  # counted once all is read
    assert "history" not in status and f"{head:,} events replayed" in status


def test_a_daemons_history_in_pages_is_the_feed_in_order(
    daemon: DaemonProcess, monkeypatch: pytest.MonkeyPatch  # noqa: F811 - the fixture above
) -> None:
    monkeypatch.setattr(sources, "PAGE", 5)

    async def scenario() -> tuple[Board, Board]:
        client = await daemon.client()
        lead, kids = await _tree(client, "default", 2)
        for sid in (lead, *kids):
            await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="Go."))
        # Every run over, a history that no longer moves: seen in one listing, since a
        # child's run that ends wakes the lead (its result) in the same commit, and states
        # read one session at a time could find the lead idle before that and the child after.
        await quiet(client)
        feed: list[tuple[int, Event]] = []
        after = 0
        while True:
            page = await client.request(EVENTS_READ, t.EventsReadParams(after=after))
            feed += map(event_of, page.events)
            if not page.events:
                break
            after = page.next
        whole = Board()
        whole.extend(feed)
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=(150, 40)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the history read")
        await client.close()
        return whole, app.board

    whole, paged = asyncio.run(scenario())
    assert paged.transcript.rows() == whole.transcript.rows()
    assert len(whole.transcript.rows()) > 3 * 5
