"""Line (m): how soon ``treemail tui`` opens on a long history. A store of 100,000 events
(50,000 delivered sends, written in bulk as line (d) writes them), opened as a read-only
replay under Textual's headless driver: the time until the tree shows every session in its
current state and the newest rows are in the transcript, against ``treemail log`` reading and
printing the same store in the same run (to /dev/null). Beside it, the time until the whole
history is folded in behind the first screen, pages newest first."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from bench.lines import Line
from bench.rigs import Pair, grow_history, open_store

__all__ = ["tui_lines"]

# What a person waits for before the screen is theirs, whatever the history's length.
TARGET = 2.0  # seconds


def _store(path: Path, sends: int) -> None:
    store = open_store(path, sync=False)
    grow_history(Pair(store), sends)
    store._env.sync(True)  # written unsynced for speed: on disk before it is read
    store.close()


def _log_time(path: Path) -> float:
    """``treemail log PATH`` in process, printing to /dev/null."""
    from treemail.adapters.ui.cli import show_log

    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        start = time.perf_counter()
        code = show_log(str(path), None, follow=False, interval=0.0)
        took = time.perf_counter() - start
    assert code == 0
    return took


async def _tui_times(path: Path) -> tuple[float, float, int]:
    """(opened, whole history folded, events folded), from the app's start."""
    from treemail.adapters.ui.tui.app import TreemailTui
    from treemail.adapters.ui.tui.sources import StoreSource

    start = time.perf_counter()
    app = TreemailTui(StoreSource(path))
    async with app.run_test(size=(150, 40)) as pilot:
        while not app.opened.is_set():
            await pilot.pause()
        opened = time.perf_counter() - start
        while not app.ready.is_set():
            await pilot.pause()
        whole = time.perf_counter() - start
        folded = app.board.folded
    return opened, whole, folded


def tui_lines(root: Path, quick: bool) -> list[Line]:
    sends = 10_000 if quick else 50_000  # two events each: accepted and consumed
    path = root / "m-tui"
    _store(path, sends)
    log = _log_time(path)
    opened, whole, folded = asyncio.run(_tui_times(path))
    assert folded >= 2 * sends, folded
    events = f"{folded // 1000}k"
    return [
        Line("m_open", f"(m) tui opens on {events} events", opened, log, "s",
             "treemail log of the same store", f"< {TARGET:.0f} s", opened < TARGET),
        Line("m_whole", f"(m) tui, whole {events} history folded", whole, log, "s",
             "treemail log of the same store", "-", None),
    ]
