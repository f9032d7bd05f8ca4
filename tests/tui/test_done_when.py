"""The TUI's done-when, driven headlessly: in a fresh directory `treemail daemon`, then
`treemail demo --connect`, with `treemail tui` (its app, under the pilot) open on the same
data directory. The TUI shows the demo's tree and conversation live; the demo waits on its
lead's steer, held under an ``ask`` rule, until the TUI's approvals pane answers it (``t``,
tree scope); then the demo finishes, with every message consumed once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from textual.widgets import DataTable

from tests.daemon.conftest import DaemonProcess
from tests.tui.conftest import reaped, until, wide_approval
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.screenshot import screen_text
from treemail.adapters.ui.tui.sources import LiveSource, choose
from treemail.core.lifecycle import MessageState, SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_READ

T = TypeVar("T")


def _fresh_daemon(tmp_path: Path,
                  scenario: Callable[[LiveSource], Coroutine[Any, Any, T]]) -> tuple[T, int, str]:
    """``scenario`` beside `treemail daemon` in a fresh directory (stopped after: its exit
    status and stderr), with the TUI's source found by the data directory, as `treemail tui`
    finds it."""
    with reaped(DaemonProcess(tmp_path / ".treemail")) as daemon:
        source = choose(tmp_path / ".treemail", None)
        assert isinstance(source, LiveSource)
        result = asyncio.run(scenario(source))
        stopped, err = daemon.terminate()
    return result, stopped, err


def _shows_held(app: TreemailTui) -> bool:
    """Whether the screen shows every held call's body (its first words) and the keys."""
    screen = screen_text(app)
    bodies = [str((held.get("arguments") or {}).get("body", ""))[:30] for held in app.held]
    return bool(bodies) and all(body in screen for body in bodies) and "Approve tree" in screen


async def _read_lines(process: asyncio.subprocess.Process, into: list[str]) -> None:
    """Every line ``process`` prints, as it prints it, until it closes its output."""
    assert process.stdout is not None
    while line := await process.stdout.readline():
        into.append(line.decode())


def _asked(printed: list[str], answered: int) -> bool:
    """Whether the demo has said a call waits for the user's approval, beyond ``answered``."""
    return sum("waits for your approval" in line for line in printed) > answered


async def _followed(app: TreemailTui, source: LiveSource, pilot: Any) -> None:
    """Wait until the TUI has folded the daemon's whole feed. Under load the TUI folds well
    behind the daemon (seconds between folds, every event already received), so the wait
    fails only once the TUI folds nothing more, saying how far it got."""
    client = source._client()
    head = (await client.request(EVENTS_READ, t.EventsReadParams(limit=1))).head
    await until(lambda: app.board.last >= head, pilot.pause,
                f"the TUI to fold the feed through {head}",
                # a daemon that stopped sending and a TUI that stopped folding both show here
                progress=lambda: (app.board.last, client.notifications.qsize()))


def test_the_tui_watches_the_connected_demo_and_answers_its_approvals(tmp_path: Path) -> None:
    async def scenario(source: LiveSource) -> tuple[int, str, TreemailTui, int]:
        app = TreemailTui(source)
        answered = 0
        captures: list[str] = []  # the screen while the demo waits on its approval
        async with app.run_test(size=(160, 44)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the TUI connected")
            demo = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "treemail", "demo", "--connect", cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE, stderr=subprocess.STDOUT)
            printed: list[str] = []
            finished = asyncio.create_task(_read_lines(demo, printed))
            # Until the demo ends (once its approval is answered, it finishes): the timeout
            # is a safety net that fails here, not a budget the demo must meet to be answered.
            async with asyncio.timeout(300):
                while not finished.done():
                    if app.held:  # the demo waits on the user: answer it from the TUI
                        # as a user does, once the demo has said it waits (the TUI may see the
                        # hold before the demo's rest of the tree settles and it asks)
                        await until(partial(_asked, printed, answered), pilot.pause,
                                    "the demo asking for the answer")
                        app.query_one("#approvals", DataTable).focus()
                        # Under load the screen may show the pane's rows a few frames after
                        # the hold is known: capture it once it does.
                        await until(lambda: _shows_held(app), pilot.pause,
                                    "the approvals pane showing the held call")
                        captures.append(screen_text(app))
                        question = await wide_approval(app, pilot, "t")
                        assert "tree scope" in question, question
                        await until(lambda: not app.held, pilot.pause, "the approval answered")
                        answered += 1
                    await pilot.pause(0.02)
            await finished
            out = "".join(printed)
            code = await demo.wait()
            await _followed(app, source, pilot)
        if capture := os.environ.get("TREEMAIL_TUI_CAPTURE"):
            Path(capture).write_text("\n\n".join(captures) + "\n", encoding="utf-8")
        assert len(captures) == answered
        for screen in captures:  # the held steer in the approvals pane, the keys below
            assert "Look at the tokenizer first, then" in screen and "child" in screen
            assert "Approve tree" in screen and "demo_lead_" in screen, screen
        return code, out, app, answered

    (code, out, app, answered), stopped, err = _fresh_daemon(tmp_path, scenario)
    assert code == 0 and "each exactly once" in out, out
    # It waited for the TUI: one held call, answered there, and nowhere else.
    assert answered == 1, out
    assert "waits for your approval" in out and "answered: approved (scope tree)" in out, out
    assert stopped == 0, err
    # The whole tree, by parent links, and the user's steer of explore, consumed in place.
    lines = list(app.board.sessions.values())
    assert len(lines) >= 4 and sum(line.parent is None for line in lines) == 1
    assert all(line.state.value in (SessionState.IDLE, SessionState.FINISHED) and line.pending == 0
               for line in lines)
    steer = [row for row in app.board.transcript.rows()
             if row.state is not None and "Look at the tokenizer first." in row.text]
    assert [row.state for row in steer] == [MessageState.CONSUMED]
    assert "explore_" in steer[0].who and "(mode=steer)" in steer[0].text
    # The lead's held steer reached explore once approved, and was consumed there too.
    held = [row for row in app.board.transcript.rows() if row.state is not None
            and 'agent mail from demo_lead_' in row.text
            and '"Look at the tokenizer first, then the nesting rules."' in row.text]
    assert [row.state for row in held] == [MessageState.CONSUMED] and "explore_" in held[0].who
    print(f"approvals answered from the TUI: {answered}")


def test_in_the_done_whens_order_a_tui_opened_on_the_waiting_demo_lets_it_finish(
    tmp_path: Path,
) -> None:
    """`treemail daemon`, then `treemail demo --connect`, then `treemail tui`: the TUI,
    opened while the demo waits, lists the held call from the daemon and answers it (`a`,
    once); the rest of the conversation then arrives in it live."""
    async def scenario(source: LiveSource) -> tuple[int, str, TreemailTui, int]:
        demo = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "treemail", "demo", "--connect", cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=subprocess.STDOUT)
        assert demo.stdout is not None
        printed: list[str] = []
        async with asyncio.timeout(300):  # a safety net: the demo asks once its tree settles
            while "waits for your approval" not in (line := (await demo.stdout.readline())
                                                    .decode()):
                assert line, "".join(printed)  # the demo ended without asking
                printed.append(line)
        app = TreemailTui(source)
        async with app.run_test(size=(160, 44)) as pilot:
            await until(app.ready.is_set, pilot.pause, "the TUI caught up")
            opened = app.board.last
            await until(lambda: bool(app.held), pilot.pause, "the held call listed")
            app.query_one("#approvals", DataTable).focus()
            await pilot.press("a")
            out = (await demo.communicate())[0].decode()
            code = await demo.wait()
            await _followed(app, source, pilot)
        return code, "".join(printed) + out, app, opened

    (code, out, app, opened), stopped, err = _fresh_daemon(tmp_path, scenario)
    assert code == 0 and "answered: approved (scope once)" in out, out
    assert "each exactly once" in out and stopped == 0, (out, err)
    assert not app.held
    # Events came after the TUI opened, live; among them the approved steer reaching
    # explore (accepted only once answered, so after the TUI opened), consumed there.
    assert app.board.last > opened
    steer = [row for row in app.board.transcript.rows() if row.state == MessageState.CONSUMED
             and '"Look at the tokenizer first, then the nesting rules."' in row.text
             and "agent mail from demo_lead_" in row.text]
    assert len(steer) == 1
