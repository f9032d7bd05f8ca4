"""The TUI against a real daemon: a plugin body and a held send's body carrying terminal
commands (a clipboard write, a row erase, BEL, CR, an 8-bit CSI, a bidi override) show in
the transcript and approvals panes with their control characters escaped, and the screen
holds none of them raw."""

from __future__ import annotations

import asyncio

from tests.daemon.conftest import DaemonProcess, call_as_run
from tests.daemon.test_terminal_rows import HOSTILE, RAW, SHOWN
from tests.tui.conftest import until
from tests.tui.test_pilot import (
    SIZE,
    _row,
    _rows,
    _tree,
    daemon,  # noqa: F401 - the same daemon, one per module
)
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.screenshot import screen_text
from treemail.adapters.ui.tui.sources import LiveSource
from treemail.protocol import types as t
from treemail.protocol.methods import PLUGIN_PRODUCER_SEND


def test_rows_and_approvals_show_control_characters_escaped(
    daemon: DaemonProcess,  # noqa: F811 - the fixture imported above
) -> None:
    async def scenario() -> tuple[list[str], list[str], str]:
        client = await daemon.client()
        _, (a, b) = await _tree(client, "worker", 2)
        app = TreemailTui(LiveSource(daemon.socket))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: b in app.nodes, pilot.pause, "the tree shown")
            await client.request(
                PLUGIN_PRODUCER_SEND, t.ProducerSendParams(session_id=a, body=HOSTILE))
            call = await call_as_run(client, a, "tui-control",
                                    {"to": app.board.sessions[b].handle, "body": HOSTILE})
            held = call.approval_id
            assert held is not None
            await until(lambda: _row(app, held) is not None, pilot.pause, "the approval shown")
            await until(lambda: any("plugin mail" in str(r[-1]) for r in _rows(app)),
                        pilot.pause, "the plugin mail row")
            rows = [str(cell) for row in _rows(app) for cell in row]
            approval = _row(app, held) or []
            screen = screen_text(app)
            await app.source.answer(held, False, "once")
        await client.close()
        return rows, approval, screen

    rows, approval, screen = asyncio.run(scenario())
    for text in (*rows, *approval, screen):
        assert RAW.search(text) is None, repr(text)
    assert any(SHOWN in row for row in rows)
    assert approval[-1].startswith(SHOWN) and "\\u202eevil" in approval[-1]
