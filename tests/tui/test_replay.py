"""The TUI on a store with no daemon: a read-only replay. The embedded demo's store has fixed
ids, so the transcript pane of one of its sessions is compared as text with a snapshot; the
store's files are byte for byte the same afterwards, and answering an approval is refused."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Tree

from tests.tui.conftest import assert_snapshot, until
from treemail.adapters.ui.cli import main
from treemail.adapters.ui.tui.app import MATCH, TreemailTui
from treemail.adapters.ui.tui.screenshot import pane_text
from treemail.adapters.ui.tui.sources import StoreSource, choose
from treemail.core.errors import InvalidRequest
from treemail.core.lifecycle import MessageState

SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("demo") / "store"
    assert main(["demo", "--path", str(store)]) == 0
    return store


def _digest(store: Path) -> dict[str, str]:
    """Every file of the store by its content, but LMDB's lock file, whose reader table any
    reader updates (shared memory beside the store, not the store)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.name != "lock.mdb" else ""
            for p in sorted(store.iterdir())}


def test_a_replay_shows_the_demo_and_writes_nothing(
    demo_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    before = _digest(demo_store)
    source = choose(demo_store.parent, None)  # no daemon there: the stored store, read-only
    assert isinstance(source, StoreSource) and source.read_only

    async def scenario() -> tuple[str, str, str]:
        app = TreemailTui(source)
        async with app.run_test(size=(150, 40)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            await pilot.pause()
            loaded = str(app.query_one("#status").render())
            explore = next(s for s in app.board.sessions.values()
                           if s.handle.startswith("explore_"))
            app.query_one("#sessions", Tree).move_cursor(app.nodes[explore.session_id])
            await until(lambda: app.selected == explore.session_id, pilot.pause,
                        "explore selected")
            await pilot.pause()
            shown = pane_text(app, "#transcript")
            app.query_one("#approvals", DataTable).focus()
            await pilot.press("t")
            await pilot.pause()
            return loaded, shown, str(app.query_one("#status").render())

    loaded, shown, status = asyncio.run(scenario())
    # Before anything is picked the status line says what is shown and how to go on.
    assert "sessions," in loaded and "events replayed" in loaded and "pick a session" in loaded
    assert_snapshot(shown, SNAPSHOTS / "demo_explore_transcript.txt")
    assert "no send waits for approval" in status or "read-only" in status
    assert _digest(demo_store) == before


def test_search_moves_to_the_matching_rows(demo_store: Path) -> None:
    async def scenario() -> list[str]:
        app = TreemailTui(StoreSource(demo_store))
        found = []
        async with app.run_test(size=(150, 40)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            await pilot.press("slash", *MessageState.CONSUMED, "enter")
            table = app.query_one("#transcript", DataTable)
            for _ in range(3):
                found.append(str(table.get_row_at(table.cursor_row)[-1]))
                await pilot.press("n")
            found.append(str(app.query_one("#status").render()))
            await pilot.press("N", "N")  # back from the 4th match to the 2nd
            found.append(str(table.get_row_at(table.cursor_row)[-1]))
            found.append(str(app.query_one("#status").render()))
        return found

    first, second, third, status, back, back_status = asyncio.run(scenario())
    assert all(row.startswith("consumed ") for row in (first, second, third))
    assert len({first, second, third}) == 3
    assert "· match 4 of " in status  # after the counts, which stay on the line
    assert back == second and "· match 2 of " in back_status


def test_search_marks_every_match_and_a_new_search_unmarks_the_old(demo_store: Path) -> None:
    def marked(table: DataTable[Any]) -> dict[str, list[str]]:
        """Each row's text: the parts marked as matches."""
        cells = [table.get_row_at(i)[-1] for i in range(table.row_count)]
        return {cell.plain: [cell.plain[span.start:span.end] for span in cell.spans
                             if span.style == MATCH] for cell in cells}

    async def scenario() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        app = TreemailTui(StoreSource(demo_store))
        async with app.run_test(size=(150, 40)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            table = app.query_one("#transcript", DataTable)
            await pilot.press("slash", *"TOKENIZER", "enter")
            first = marked(table)
            await pilot.press("slash", *["backspace"] * 9, *"steer", "enter")
            return first, marked(table)

    first, second = asyncio.run(scenario())
    hits = {text: parts for text, parts in first.items() if parts}
    assert hits and all("tokenizer" in text.lower() for text in hits)
    assert all(parts == re.findall("tokenizer", text, re.IGNORECASE)
               for text, parts in hits.items())  # each match, case ignored, and only those
    assert not [text for text, parts in first.items() if "tokenizer" in text.lower()
                and not parts]
    assert {text for text, parts in second.items() if parts} == {
        text for text in second if "steer" in text.lower()}
    assert not any("tokenizer" in part.lower() for parts in second.values() for part in parts)


def test_a_replay_refuses_to_answer_an_approval(demo_store: Path) -> None:
    with pytest.raises(InvalidRequest, match="read-only"):
        asyncio.run(StoreSource(demo_store).answer("any", True, "tree"))
