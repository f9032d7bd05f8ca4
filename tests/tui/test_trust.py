"""The TUI's answers can be trusted, against a real daemon subprocess: the approval keys work
on the approvals pane only (letters typed elsewhere answer nothing), a session- or tree-wide
approval asks first, a deny carries the user's reason to the agent, the answer reads as a
sentence; a session whose call is held says it waits on the user, in the tree and in
`treemail sessions`; the status line's counts follow the feed; the actor dot marks resident
actors only. Every wait is on a condition, never a fixed sleep."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

from textual.widgets import Input, Static

from tests.daemon.conftest import DaemonProcess, call_as_run, configured
from tests.tui.conftest import until
from tests.tui.test_pilot import (
    SIZE,
    _approval,
    _row,
    _tree,
    daemon,  # noqa: F401 - the same daemon, one per module
)
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.board import WAITING
from treemail.adapters.ui.tui.screens import Confirm, Deny
from treemail.adapters.ui.tui.screenshot import pane_text
from treemail.adapters.ui.tui.sources import LiveSource
from treemail.core.lifecycle import ApprovalState, SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import RUN_SUBMIT, SESSION_CREATE, SESSION_GET


async def _cli(server: DaemonProcess, *argv: str) -> str:
    """``treemail ARGV`` against the daemon, as a person runs it: its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "treemail", *argv, "--socket", str(server.socket),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await process.communicate()
    assert process.returncode == 0, out.decode()
    return out.decode()


class _Told(TreemailTui):
    """The app, its notifications recorded as they are made (Textual keeps them privately)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.told: list[str] = []

    def notify(self, message: str, **options: Any) -> None:
        self.told.append(message)
        super().notify(message, **options)


def _label(app: TreemailTui, session_id: str) -> str:
    return str(app.nodes[session_id].label)


def _status(app: TreemailTui) -> str:
    return str(app.query_one("#status", Static).render())


def test_keys_answer_only_on_the_approvals_pane_and_wide_ones_ask_first(
    daemon: DaemonProcess,  # noqa: F811 - the fixture imported above
) -> None:
    async def scenario() -> tuple[t.ApprovalView, str, str, str]:
        client = await daemon.client()
        _, (a, b) = await _tree(client, "worker", 2)
        app = _Told(LiveSource(daemon.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: b in app.nodes, pilot.pause, "the tree shown")
            call = await call_as_run(client, a, "trust-1", {
                "to": app.board.sessions[b].handle, "body": "May I?", "mode": "queue"})
            held = call.approval_id
            assert held is not None
            await until(lambda: _row(app, held) is not None, pilot.pause, "the approval shown")
            # The sender waits on the user: the tree says so, and so does the CLI.
            await until(lambda: WAITING in _label(app, a), pilot.pause, "a waiting on you")
            assert WAITING not in _label(app, b)
            listed = await _cli(daemon, "sessions")
            mine = next(line for line in listed.splitlines() if a in line)
            other = next(line for line in listed.splitlines() if b in line)
            assert WAITING in mine and WAITING not in other, listed

            # Letters typed as the app opened (the tree has the focus), on the transcript,
            # and in a search word answer nothing.
            assert app.focused is app.query_one("#sessions")
            await pilot.press("a", "t", "d")
            app.query_one("#transcript").focus()
            await pilot.press("t", "a", "s", "d")
            await pilot.press("slash", *"stat", "enter")
            # A wide scope asks first, and a no answers nothing.
            app.query_one("#approvals").focus()
            await pilot.press("t")
            await until(lambda: isinstance(app.screen, Confirm), pilot.pause, "the question")
            question = str(app.screen.query_one("#question", Static).render())
            await pilot.press("n")
            await until(lambda: not isinstance(app.screen, Confirm), pilot.pause, "a no")
            assert (await _approval(client, held)).state == ApprovalState.PENDING
            # Denied with a reason: the agent's result carries it.
            await pilot.press("d")
            await until(lambda: isinstance(app.screen, Deny), pilot.pause, "the deny dialog")
            await pilot.press(*"not to b, ask the lead", "enter")
            await until(lambda: _row(app, held) is None, pilot.pause, "the approval answered")
            await until(lambda: WAITING not in _label(app, a), pilot.pause, "a no longer waits")
            answered = await _approval(client, held)
            told = app.told
            searched = app.query_one("#search", Input).value
        await client.close()
        return answered, question, told[-1], searched

    answered, question, told, searched = asyncio.run(scenario())
    # Had any stray letter answered it, the deny would have found nothing to answer.
    assert answered.state == ApprovalState.DENIED and searched == "stat"
    assert answered.outcome is not None and answered.outcome.message is not None
    assert "the user said: not to b, ask the lead" in answered.outcome.message
    assert "tree scope" in question and "every send_message to a sibling peer" in question
    # The toast is a sentence, not the outcome's JSON.
    assert told.startswith("denied: permission denied") and "{" not in told, told
    assert told.endswith("(permission:denied)"), told


def test_the_status_counts_and_the_actor_dot_follow_the_daemon(
    daemon: DaemonProcess,  # noqa: F811 - the fixture imported above
) -> None:
    async def scenario() -> tuple[str, str, str, str]:
        client = await daemon.client()
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(app.ready.is_set, pilot.pause, "the TUI caught up")
            before = _status(app)
            count = len(app.board.sessions)
            made = (await client.request(SESSION_CREATE,
                                         t.SessionCreateParams(agent="default"))).session_id
            await until(lambda: made in app.nodes, pilot.pause, "the new session")
            await until(lambda: f"{count + 1} sessions" in _status(app), pilot.pause,
                        "the count moving on")
            idle = _label(app, made)
            await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=made, text="Go."))
            await until(lambda: app.board.sessions[made].resident, pilot.pause,
                        "its actor spawned")
            await pilot.pause()
            return before, _status(app), idle, _label(app, made)

    before, after, idle, running = asyncio.run(scenario())
    assert before != after and "waiting on you" in after
    # No actor before its first run; one once a run is queued for it.
    assert not idle.startswith("●") and running.startswith("●"), (idle, running)


def test_the_state_column_survives_a_small_terminal(
    daemon: DaemonProcess,  # noqa: F811 - the fixture imported above
) -> None:
    async def scenario() -> tuple[str, int]:
        client = await daemon.client()
        await _tree(client, "worker", 2)
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=(100, 30)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the TUI caught up")
            await pilot.pause()
            shown = pane_text(app, "#sessions")
        await client.close()
        return shown, len(app.board.sessions)

    shown, sessions = asyncio.run(scenario())
    states = "|".join(re.escape(s) for s in (*(s.value for s in SessionState), WAITING))
    stated = [line for line in shown.splitlines() if re.search(rf"({states})  ✉ \d", line)]
    # Every session the pane has room for shows its state and pending count, however
    # long its handle and however deep it sits.
    assert len(stated) >= min(sessions, 10), shown


def test_the_actor_dot_goes_out_when_the_daemon_evicts_the_actor(tmp_path: Path) -> None:
    server = configured(tmp_path / "data", "[daemon]\nactor_idle_timeout = 0.5\n")

    async def scenario() -> tuple[str, str, bool]:
        client = await server.client()
        app = TreemailTui(LiveSource(server.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(app.ready.is_set, pilot.pause, "the TUI caught up")
            made = (await client.request(SESSION_CREATE, t.SessionCreateParams(
                agent="default", task="Go."))).session_id
            await until(lambda: made in app.board.sessions and app.board.sessions[made].resident,
                        pilot.pause, "its actor spawned")
            lit = _label(app, made)
            # Its run ends, its actor idles past actor_idle_timeout and is evicted: no event
            # says so, and the dot still goes out.
            await until(lambda: not app.board.sessions[made].resident, pilot.pause,
                        "the dot put out")
            await pilot.pause()
            out = _label(app, made)
        view = await client.request(SESSION_GET, t.SessionGetParams(session_id=made))
        await client.close()
        return lit, out, view.resident

    try:
        lit, out, resident = asyncio.run(scenario())
    finally:
        code, err = server.terminate()
    assert code == 0, err
    assert lit.startswith("●") and not out.startswith("●"), (lit, out)
    assert resident is False  # the daemon says so too (session.get)
