"""What the TUI draws, read from its SVG screenshots (``App.export_screenshot``) by content:
the main screen of a replay, a row read whole in the detail view, the list of keys, and a
search match brought into view. Text compared, not the SVG's bytes (``conftest.svg_lines``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import DataTable

from tests.daemon.conftest import DaemonProcess
from tests.tui.conftest import svg_lines, until
from tests.tui.test_pilot import (
    _tree,
    daemon,  # noqa: F401 - the same daemon, one per module
)
from tests.tui.test_replay import demo_store  # noqa: F401 - the demo's store, one per module
from treemail.adapters.ui.tui import app as app_module
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.screens import KEYS, Detail, Help
from treemail.adapters.ui.tui.screenshot import pane_text, screen_text
from treemail.adapters.ui.tui.sources import LiveSource, StoreSource
from treemail.core.lifecycle import SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import RUN_SUBMIT


def test_the_main_screen_of_a_replay(demo_store: Path) -> None:  # noqa: F811 - fixture
    async def scenario() -> tuple[list[str], str, TreemailTui]:
        app = TreemailTui(StoreSource(demo_store))
        async with app.run_test(size=(100, 30)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            await until(lambda: "run 4 finished" in pane_text(app, "#transcript"),
                        pilot.pause, "the newest rows in view")
            # The footer too: on a busy machine the transcript can be drawn a frame before
            # it, and a screenshot whose last line is still blank has one line fewer.
            await until(lambda: "^p palette" in screen_text(app).split("\n")[-1],
                        pilot.pause, "the footer drawn")
            return svg_lines(app.export_screenshot()), screen_text(app), app

    shot, text, app = asyncio.run(scenario())
    # The SVG holds the very screen the compositor drew, line for line.
    assert shot == text.split("\n")
    screen = "\n".join(shot)
    assert "treemail — replay (read-only): " in shot[0]
    for line in app.board.sessions.values():  # each session: its state, mail, handle
        assert f"finished  ✉ 0  {line.handle[:8]}" in screen, screen
    # The newest rows, at the bottom of the transcript, and the live counts under them.
    assert "run 4 finished" in screen and "model says \"Shipped: the parser" in screen
    assert "4 sessions, 0 waiting on you, 152 events replayed" in screen
    assert "approvals: held ask sends" in screen and "● " not in screen  # no actor in a replay
    assert any(line.startswith("╰") for line in shot) and "^p palette" in shot[-1]


def test_enter_reads_a_row_whole_wrapped(
    daemon: DaemonProcess,  # noqa: F811 - the fixture imported above
) -> None:
    body = ("The whole plan, longer than any row shows: "
            + " ".join(f"step{i}" for i in range(60)) + ".\nSecond line: the end.")

    async def scenario() -> tuple[list[str], list[str], bool]:
        client = await daemon.client()
        lead, _ = await _tree(client, "default", 0)
        sent = await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=lead, text=body))
        key = f"mail:{sent.message_id}"
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.query_one("#transcript", DataTable)
            # Its run's rows still arriving would take the cursor along (a pane on its last
            # row follows what arrives): under load "run 1 finished" came between the move
            # and the enter, and enter read that row. So once the run is over, the feed still.
            await until(lambda: key in table.rows and (line := app.board.sessions.get(lead))
                        is not None and line.state is SessionState.FINISHED, pilot.pause,
                        "the mail row, and its run finished")
            row = pane_text(app, "#transcript")
            table.focus()
            table.move_cursor(row=table.get_row_index(key))
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, Detail), pilot.pause, "the detail view")
            await pilot.pause()
            shot = svg_lines(app.export_screenshot())
            await pilot.press("escape")
            await until(lambda: not isinstance(app.screen, Detail), pilot.pause, "closed")
            closed = "step59" not in screen_text(app)
        await client.close()
        return row.split("\n"), shot, closed

    row, shot, closed = asyncio.run(scenario())
    assert not any("step59" in line for line in row)  # the row shortens the body
    screen = "\n".join(shot)
    inside = [line.split("█")[1] for line in shot if line.count("█") >= 2]  # the dialog
    flat = "".join("".join(inside).split())
    assert "".join(body.split()) in flat  # the whole body, wrapped over lines
    wrapped = [line for line in inside if "step" in line]
    assert len(wrapped) >= 3 and all(len(line) <= 100 for line in shot)
    assert any("Second line: the end." in line for line in shot)  # its own line kept
    assert "user mail, mode queue" in screen and "lifecycle: #" in screen
    assert closed


def test_question_mark_lists_every_key(demo_store: Path) -> None:  # noqa: F811 - fixture
    async def scenario() -> tuple[list[str], bool]:
        app = TreemailTui(StoreSource(demo_store))
        async with app.run_test(size=(120, 40)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            await pilot.press("question_mark")
            await until(lambda: isinstance(app.screen, Help), pilot.pause, "the keys")
            await pilot.pause()
            shot = svg_lines(app.export_screenshot())
            await pilot.press("escape")
            await until(lambda: not isinstance(app.screen, Help), pilot.pause, "closed")
            return shot, app.screen.is_current

    shot, back = asyncio.run(scenario())
    screen = "\n".join(shot)
    for key, where, what in KEYS:
        assert any(key in line and where in line and what in line for line in shot), (
            key, screen)
    assert back


def test_search_brings_its_match_into_view(demo_store: Path) -> None:  # noqa: F811 - fixture
    async def scenario() -> tuple[str, str, str]:
        app = TreemailTui(StoreSource(demo_store))
        async with app.run_test(size=(100, 24)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            table = app.query_one("#transcript", DataTable)
            await until(lambda: "run 4 finished" in pane_text(app, "#transcript"),
                        pilot.pause, "the newest rows in view")
            before = pane_text(app, "#transcript")
            # The first row of all, far above the newest rows shown at the bottom.
            await pilot.press("slash", *"Ship the parser fix, reviewed", "enter")
            await until(lambda: table.cursor_row == 1, pilot.pause, "the match")
            await until(lambda: "Ship the parser fix" in pane_text(app, "#transcript"),
                        pilot.pause, "the match in view")
            shown = pane_text(app, "#transcript")
            await pilot.press("N")  # the one match, found again from the other side
            return before, shown, pane_text(app, "#transcript")

    before, shown, again = asyncio.run(scenario())
    assert "Ship the parser fix" not in before  # it was out of view
    assert "Ship the parser fix" in shown and "Ship the parser fix" in again


def test_w_wraps_the_rows_to_the_pane(demo_store: Path) -> None:  # noqa: F811 - fixture
    async def scenario() -> tuple[str, str]:
        app = TreemailTui(StoreSource(demo_store))
        async with app.run_test(size=(100, 24)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            await until(lambda: 'model says "Shipped' in pane_text(app, "#transcript"),
                        pilot.pause, "the newest rows in view")
            one_line = pane_text(app, "#transcript")
            await pilot.press("w")
            await until(lambda: 'tested."' in pane_text(app, "#transcript"), pilot.pause,
                        "the newest long row wrapped")
            return one_line, pane_text(app, "#transcript")

    one_line, wrapped = asyncio.run(scenario())
    assert 'model says "Shipped: the parser' in one_line and 'tested."' not in one_line
    lines = wrapped.split("\n")
    says = next(i for i, line in enumerate(lines) if 'model says "Shipped: the' in line)
    assert 'tested."' in "".join(lines[says:says + 3])  # the rest on the lines below


def test_the_pane_holds_a_window_of_rows_and_search_moves_it(
    demo_store: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811 - the fixture above
) -> None:
    monkeypatch.setattr(app_module, "WINDOW", 10)

    async def scenario() -> tuple[int, str, str, str, int]:
        app = TreemailTui(StoreSource(demo_store))
        async with app.run_test(size=(100, 30)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the replay loaded")
            table = app.query_one("#transcript", DataTable)
            newest = (table.row_count, str(table.border_subtitle))
            every = app.board.transcript.rows()
            await pilot.press("slash", *"Ship the parser fix, reviewed", "enter")
            await until(lambda: str(table.border_subtitle).startswith("(rows 1 to"),
                        pilot.pause, "the pane moved to the match")
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            return (*newest, str(key), every[1].key, len(every))

    count, subtitle, key, match, rows = asyncio.run(scenario())
    assert count == 10 and subtitle == f"(rows {rows - 9} to {rows} of {rows})"
    assert key == match  # the cursor on the match, though it was outside the pane
