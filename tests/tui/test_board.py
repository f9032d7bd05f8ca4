"""The sessions pane's rows: after the snapshot it opens on, they follow the feed alone: a
session is live from its creation until a revert makes it a ghost, exactly as the stored
session's flag says, and the TUI polls nothing."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.test_paging import Counting
from tests.tui.conftest import until
from tests.unit.conftest import World
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.board import Board
from treemail.adapters.ui.tui.sources import LiveSource
from treemail.core.memory_store import MemoryStore
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_SUBSCRIBE, SESSION_CREATE, SESSION_GET, SESSION_LIST


def test_the_live_flag_folds_from_the_feed_as_the_store_keeps_it() -> None:
    world = World(MemoryStore())
    root = world.root("root", {"*": "allow"})
    top = world.child(root, "top", {"*": "allow"})
    low = world.child(top, "low", {"*": "allow"})
    kept = world.child(root, "kept", {"*": "allow"})
    board = Board()
    board.extend(world.engine.feed())
    assert all(line.live for line in board.sessions.values())
    world.engine.revert(top.session_id)
    board.extend(world.engine.feed(board.last))
    stored = {s.session_id: s.live for s in world.engine.sessions()}
    assert {sid: line.live for sid, line in board.sessions.items()} == stored
    assert stored == {root.session_id: True, top.session_id: False, low.session_id: False,
                      kept.session_id: True}
    assert board.sessions[top.session_id].label().endswith("(ghost)")


class CountingSource(LiveSource):
    """The live source over a client that counts its calls by method."""

    async def open(self) -> None:
        self.client = await Counting.connect(self.address, name="treemail tui")


def test_the_tui_shows_new_sessions_without_listing_them(tmp_path: Path) -> None:
    """Sessions created while the TUI watches appear in its tree, and over the whole time
    it listed the sessions once, for the snapshot it opens on: nothing is polled."""
    process = DaemonProcess(tmp_path / "data")

    async def go() -> Counter[str]:
        maker = await process.client()
        source = CountingSource(process.socket)
        tui = TreemailTui(source)
        try:
            first = await maker.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            async with tui.run_test(size=(120, 40)) as pilot:
                await until(lambda: tui.ready.is_set() and first.session_id in tui.nodes,
                            pilot.pause, "the TUI caught up")
                made = [(await maker.request(SESSION_CREATE, t.SessionCreateParams(
                    agent="default"))).session_id for _ in range(12)]
                await until(lambda: all(sid in tui.nodes for sid in made), pilot.pause,
                            "every new session in the tree")
                assert isinstance(source.client, Counting)
                return source.client.calls
        finally:
            await maker.close()

    try:
        calls = run(go())
    finally:
        code, err = process.terminate()
        assert code == 0, err
    assert calls[SESSION_LIST.name] == 1 and calls[SESSION_GET.name] == 0, calls
    assert calls[EVENTS_SUBSCRIBE.name] == 1, calls
