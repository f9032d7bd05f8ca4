"""A send whose answer is lost with the daemon connection is stored once.

``treemail mcp`` talks to the daemon through a relay (``Relay``) that lets every frame pass
but one: the daemon's answer to an ``external.call``, which it holds back. The send is in
the store by then (the daemon answers after its commit). The relay then either drops the
connection (the daemon lives on) or restarts the daemon first (SIGKILL: the turn's run dies
with it, so the retry comes in another run); the MCP server connects again and sends the
call again. The agent gets one answer, and the recipient one message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import (
    HttpServer,
    answer,
    data_dir,
    mail_of,
    make_tree,
    mcp_client,
)
from treemail.protocol import methods as m
from treemail.protocol import types as t


class Relay:
    """A Unix socket that relays each connection to the daemon's, and loses the answer to
    the first ``external.call`` after ``arm``: it runs ``trip`` (a daemon restart, or
    nothing), then closes the connection the answer was for."""

    def __init__(self, path: Path, target: Callable[[], Path]) -> None:
        self.path = path
        self.target = target
        self.trip: Callable[[], Awaitable[None]] | None = None
        self.lost: list[dict[str, Any]] = []  # the answers held back
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_unix_server(self._serve, str(self.path),
                                                       limit=1 << 24)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    def arm(self, trip: Callable[[], Awaitable[None]]) -> None:
        self.trip = trip

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        try:
            daemon_r, daemon_w = await asyncio.open_unix_connection(str(self.target()),
                                                                    limit=1 << 24)
        except OSError:
            client_w.close()
            return
        calls: set[object] = set()  # ids of this connection's external.call requests

        async def asked(frame: dict[str, Any]) -> bool:
            if frame.get("method") == m.EXTERNAL_CALL.name:
                calls.add(frame.get("id"))
            return False

        async def answered(frame: dict[str, Any]) -> bool:
            if self.trip is None or frame.get("id") not in calls or "result" not in frame:
                return False
            trip, self.trip = self.trip, None
            self.lost.append(frame)
            await trip()
            return True  # held back: the connection ends without it

        up = asyncio.ensure_future(_pump(client_r, daemon_w, asked))
        try:
            await _pump(daemon_r, client_w, answered)
        finally:
            up.cancel()
            client_w.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                hold: Callable[[dict[str, Any]], Awaitable[bool]]) -> None:
    """Relay each frame until ``hold`` keeps one back or either side closes."""
    try:
        while (line := await reader.readline()) and not await hold(json.loads(line)):
            writer.write(line)
            await writer.drain()
    except (ConnectionError, ValueError):
        pass
    finally:
        writer.close()


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("fault", ["drop", "restart"])
def test_a_send_whose_answer_was_lost_is_sent_again_and_stored_once(
    tmp_path: Path, transport: str, fault: str,
) -> None:
    base = data_dir(tmp_path / "data")
    holder = {"daemon": DaemonProcess(base)}

    async def restart() -> None:
        if fault == "restart":
            await asyncio.to_thread(holder["daemon"].kill)  # SIGKILL, after the commit
            holder["daemon"] = await asyncio.to_thread(DaemonProcess, base)

    async def go() -> None:
        client = await holder["daemon"].client()
        tree = await make_tree(client)
        await client.close()
        a, b = tree.members
        async with Relay(tmp_path / "relay.sock", lambda: holder["daemon"].socket) as relay:
            relay.arm(restart)
            server = (HttpServer(holder["daemon"], socket=relay.path) if transport == "http"
                      else None)
            try:
                async with mcp_client(transport, holder["daemon"], a.token, tmp_path,
                                      http=server, socket=relay.path) as session:
                    result = await session.call_tool("send_message",
                                                     {"to": b.handle, "body": "once only"})
            finally:
                if server is not None:
                    server.stop()
        assert len(relay.lost) == 1  # the fault did happen: the first answer never arrived
        assert not result.is_error, answer(result)
        sent = answer(result)["message_id"]
        assert json.loads(relay.lost[0]["result"]["content"])["message_id"] == sent

        client = await holder["daemon"].client()
        try:
            listed = await client.every(m.MESSAGE_LIST,
                                        t.MessageListParams(session_id=b.session_id))
            assert [(one.message_id, one.body) for one in listed
                    if one.sender == a.session_id] == [(sent, "once only")]
        finally:
            await client.close()
        async with mcp_client("stdio", holder["daemon"], b.token, tmp_path) as reader:
            got = mail_of(await reader.call_tool("check_mail", {}))
            assert [one["message_id"] for one in got] == [sent]
            assert mail_of(await reader.call_tool("check_mail", {})) == []

    try:
        run(go(), timeout=180)
    finally:
        code, err = holder["daemon"].terminate()
    assert code == 0, err
