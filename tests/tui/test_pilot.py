"""The TUI driven headlessly (``App.run_test`` and its pilot) against a real daemon
subprocess: selecting a session, a steer row appearing and turning consumed in place, and an
approval answered with the tree scope from the approvals pane. Every wait is on a condition
the screen or the daemon shows, never a fixed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Tree

from tests.daemon.conftest import DaemonProcess, call_as_run, in_flight
from tests.daemon.test_scenario import WORKER
from tests.tui.conftest import reaped, slow_daemon, until, wide_approval
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.ui.tui.app import ALL, TreemailTui
from treemail.adapters.ui.tui.screenshot import pane_text
from treemail.adapters.ui.tui.sources import LiveSource
from treemail.core.lifecycle import ApprovalState, MessageState
from treemail.protocol import types as t
from treemail.protocol.methods import (
    APPROVAL_LIST,
    RUN_STEER,
    SESSION_CREATE,
    SESSION_DELEGATE,
)

SIZE = (150, 40)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    data = tmp_path_factory.mktemp("tui")
    (data / "agents").mkdir()
    (data / "agents" / "worker.md").write_text(WORKER)
    process = slow_daemon(data, delay=0.8)
    yield process
    code, err = process.terminate()
    assert code == 0, err


def _cell(app: TreemailTui, table: str, key: str) -> str:
    grid = app.query_one(table, DataTable)
    return str(grid.get_row(key)[-1]) if key in grid.rows else ""


async def _tree(client: DaemonClient, agent: str, children: int) -> tuple[str, list[str]]:
    lead = (await client.request(SESSION_CREATE, t.SessionCreateParams(agent="lead"))).session_id
    kids = [(await client.request(SESSION_DELEGATE, t.SessionDelegateParams(
        parent_session_id=lead, agent=agent, task=f"part {i}"))).session_id
        for i in range(children)]
    return lead, kids


def test_a_steer_row_appears_in_the_selected_session_and_turns_consumed(
    daemon: DaemonProcess,
) -> None:
    async def scenario() -> None:
        client = await daemon.client()
        lead, (child,) = await _tree(client, "default", 1)
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: child in app.nodes, pilot.pause, "both sessions in the tree")
            assert app.selected == ALL  # every session's rows, until one is chosen
            app.query_one("#sessions").focus()
            await pilot.press("down")
            await until(lambda: app.selected == lead, pilot.pause, "the lead selected")
            await pilot.press("down")  # from the lead to its child
            await until(lambda: app.selected == child, pilot.pause, "the child selected")
            assert "child of lead_" in pane_text(app, "#transcript")

            await in_flight(client, child)
            steer = await client.request(
                RUN_STEER, t.RunSteerParams(session_id=child, text="Look at the tokenizer first."))
            key = f"mail:{steer.message_id}"
            seen: list[str] = []

            def consumed() -> bool:
                text = _cell(app, "#transcript", key)
                if text and (not seen or seen[-1] != text.split()[0]):
                    seen.append(text.split()[0])
                return text.startswith(MessageState.CONSUMED)

            await until(consumed, pilot.pause, "the steer row consumed")
            assert seen[0] != MessageState.CONSUMED and seen[-1] == MessageState.CONSUMED, seen
            row = _cell(app, "#transcript", key)
            assert row == 'consumed  user mail (mode=steer): "Look at the tokenizer first."'
            assert sum(key == k.value for k in app.query_one("#transcript", DataTable).rows) == 1
        await client.close()

    asyncio.run(scenario())


def test_an_approval_answered_for_the_tree_lets_the_send_through(
    daemon: DaemonProcess,
) -> None:
    async def scenario() -> None:
        client = await daemon.client()
        _, (a, b) = await _tree(client, "worker", 2)
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: b in app.nodes, pilot.pause, "the tree shown")
            await in_flight(client, a)
            handle_b = app.board.sessions[b].handle
            call = await call_as_run(client, a, "tui-1", {
                "to": handle_b, "body": "I took the lexer.", "mode": "queue"})
            held = call.approval_id
            assert held
            await until(lambda: _row(app, held) is not None, pilot.pause, "the approval shown")
            assert _row(app, held) == [app.board.sessions[a].handle, handle_b, "sibling",
                                       "I took the lexer."]
            app.query_one("#approvals").focus()
            await wide_approval(app, pilot, "t")
            await until(lambda: _row(app, held) is None, pilot.pause, "the approval answered")
            answered = await _approval(client, held)
            assert (answered.state, answered.scope) == (ApprovalState.APPROVED, "tree")
            app.query_one("#sessions", Tree).move_cursor(app.nodes[b])
            # The sibling's own transcript: every session's rows show the send too.
            await until(lambda: app.selected == b, pilot.pause, "the sibling selected")
            await until(lambda: any('agent mail from' in str(r[-1]) and "I took the lexer."
                                    in str(r[-1]) for r in _rows(app)), pilot.pause,
                        "the send accepted into the sibling's transcript")
        await client.close()

    asyncio.run(scenario())


def test_a_session_picked_as_the_tui_quits_leaves_it_quietly(daemon: DaemonProcess) -> None:
    """A highlight still queued when the app quits is handled after its panes are gone: the
    exit must not crash on it (it raised NoMatches, filling a transcript no longer there)."""
    async def scenario() -> None:
        client = await daemon.client()
        _, kids = await _tree(client, "default", 2)
        await client.close()
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: all(k in app.nodes for k in kids), pilot.pause, "the tree shown")
            tree = app.query_one("#sessions", Tree)
            for node in [*app.nodes.values()] * 3:  # highlights queued, then the app quits
                tree.move_cursor(node)

    asyncio.run(scenario())


def _rows(app: TreemailTui) -> list[list[Any]]:
    grid = app.query_one("#transcript", DataTable)
    return [grid.get_row(key) for key in grid.rows]


def _row(app: TreemailTui, approval_id: str) -> list[str] | None:
    grid = app.query_one("#approvals", DataTable)
    return [str(c) for c in grid.get_row(approval_id)] if approval_id in grid.rows else None


async def _approval(client: DaemonClient, approval_id: str) -> t.ApprovalView:
    every = await client.request(APPROVAL_LIST, t.ApprovalListParams(pending_only=False))
    return next(a for a in every.approvals if a.approval_id == approval_id)


def test_a_daemon_that_goes_away_is_shown_not_waited_on(tmp_path: Path) -> None:
    async def scenario(own: DaemonProcess) -> str:
        app = TreemailTui(LiveSource(own.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(app.ready.is_set, pilot.pause, "the TUI connected")
            own.kill()
            await until(lambda: app.sub_title.startswith("stopped"), pilot.pause,
                        "the TUI noticing the daemon is gone")
            return str(app.query_one("#status").render())

    with reaped(slow_daemon(tmp_path, delay=0.0)) as own:
        status = asyncio.run(scenario(own))
    assert "the daemon closed the connection" in status, status
