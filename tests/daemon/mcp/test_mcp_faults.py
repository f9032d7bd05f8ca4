"""The external boundary under faults, through the real stack. An MCP server killed between
check_mail and the agent's next call: the mail is released and delivered again, then consumed
once. A daemon killed under MCP traffic: every send the agent saw acknowledged is in the store
after the restart, each once, and mail claimed but not consumed comes again."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import (
    HttpServer,
    answer,
    children_running,
    data_dir,
    http_session,
    mail_of,
    make_tree,
    mcp_client,
    sent_by,
    state_of,
    stdio_session,
    token_file,
    until_state,
    user_tree,
)
from treemail.adapters.daemon.errors import ExternalDaemonGone
from treemail.core.lifecycle import MessageState
from treemail.protocol import methods as m
from treemail.protocol import types as t


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_mail_read_by_a_killed_mcp_server_comes_again_and_is_consumed_once(
    daemon: DaemonProcess, tmp_path: Path, transport: str,
) -> None:
    async def go() -> None:
        async with user_tree(daemon) as (client, tree):
            a, b = tree.members
            mid = await sent_by(daemon, b.token, a.handle, "read me once")
            server = HttpServer(daemon) if transport == "http" else None
            first: list[dict[str, Any]] = []
            try:
                async with mcp_client(transport, daemon, a.token, tmp_path,
                                      http=server) as session:
                    first = mail_of(await session.call_tool("check_mail", {}))
                    if server is None:  # the stdio server this client launched
                        for pid in children_running(str(tmp_path)):
                            os.kill(pid, signal.SIGKILL)
                    else:
                        server.kill()
            except Exception:
                if not first:  # it failed before the kill: that is the test's failure
                    raise
                # else: the killed server took its client down with it, as it should
            finally:
                if server is not None:
                    server.kill()  # killed already, unless the test failed first
            assert [m["message_id"] for m in first] == [mid]
            await until_state(client, mid, MessageState.RELEASED)  # its connection ended: released

            again: list[dict[str, Any]] = []
            later: list[dict[str, Any]] = []
            server = HttpServer(daemon) if transport == "http" else None
            try:
                async with mcp_client(transport, daemon, a.token, tmp_path,
                                      http=server) as session:
                    again = mail_of(await session.call_tool("check_mail", {}))
                    later = mail_of(await session.call_tool("check_mail", {}))
            finally:
                if server is not None:
                    server.stop()
            assert [m["message_id"] for m in again] == [mid]
            assert again[0]["text"] == first[0]["text"]
            assert later == []  # the second call consumed it: never a third delivery
            assert await state_of(client, mid) == MessageState.CONSUMED

    run(go(), timeout=120)


def test_a_daemon_killed_under_mcp_traffic_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    base = data_dir(tmp_path / "data")
    holder = {"daemon": DaemonProcess(base)}

    async def go() -> None:
        client = await holder["daemon"].client()
        tree = await make_tree(client)
        await client.close()
        a, b = tree.members
        claimed = await sent_by(holder["daemon"], b.token, a.handle, "claimed, never consumed")
        acked: dict[str, str] = {}  # body -> message id, as the agent was told
        refused: list[str] = []
        path = token_file(tmp_path, a.token)
        async def restart() -> None:
            await asyncio.to_thread(holder["daemon"].kill)  # SIGKILL
            holder["daemon"] = await asyncio.to_thread(DaemonProcess, base)

        async with stdio_session(holder["daemon"], path) as session:
            got = mail_of(await session.call_tool("check_mail", {}))
            assert [m["message_id"] for m in got] == [claimed]
            await restart()  # before the agent's next call: the claim dies with the daemon
            async with asyncio.timeout(30):
                while (result := await session.call_tool("check_mail", {})).is_error:
                    assert answer(result)["error"] == ExternalDaemonGone.code
                    await asyncio.sleep(0.05)
            # Recovery released it; it comes again, and this time the next call consumes it.
            assert [m["message_id"] for m in mail_of(result)] == [claimed]

            async def traffic() -> None:
                n = 0
                while len(acked) < 20:
                    body = f"m{n}"
                    n += 1
                    result = await session.call_tool("send_message",
                                                     {"to": tree.lead, "body": body})
                    said = answer(result)
                    if result.is_error:
                        assert said["error"] == ExternalDaemonGone.code, said
                        refused.append(body)
                        await asyncio.sleep(0.05)  # the daemon restarts meanwhile
                    else:
                        acked[body] = said["message_id"]

            sending = asyncio.ensure_future(traffic())
            async with asyncio.timeout(60):
                while len(acked) < 5:
                    await asyncio.sleep(0.01)
            await restart()  # mid-traffic
            async with asyncio.timeout(90):
                await sending
        client = await holder["daemon"].client()
        try:
            assert await state_of(client, claimed) == MessageState.CONSUMED
            for body, message_id in acked.items():
                found = (await client.request(
                    m.MESSAGE_GET, t.MessageGetParams(message_id=message_id))).message
                assert (found.body, found.sender, found.recipient) == (
                    body, a.session_id, tree.lead_id)
            listed = await client.every(m.MESSAGE_LIST,
                                        t.MessageListParams(session_id=tree.lead_id))
            bodies = [one.body for one in listed if one.sender == a.session_id]
            assert len(bodies) == len(set(bodies))  # no send stored twice
            assert set(acked) <= set(bodies)
        finally:
            await client.close()

    try:
        run(go(), timeout=240)
    finally:
        code, err = holder["daemon"].terminate()
    assert code == 0, err


def test_an_http_mcp_session_that_ends_releases_its_claim_and_no_other(
    daemon: DaemonProcess, http: HttpServer,
) -> None:
    """Two MCP sessions of one ``treemail mcp --http``, for two external agents, each hold
    the mail their check_mail claimed. The first one ends (the client's DELETE): its mail is
    released and comes again on its next session; the second one's stays claimed, and its
    next call consumes it."""

    async def go() -> None:
        async with user_tree(daemon) as (client, tree):
            a, b = tree.members
            to_a = await sent_by(daemon, b.token, a.handle, "for a, claimed by a dropped session")
            to_b = await sent_by(daemon, a.token, b.handle, "for b, claimed by a live session")
            async with http_session(http.url, b.token) as sb:
                assert [one["message_id"] for one in
                        mail_of(await sb.call_tool("check_mail", {}))] == [to_b]
                async with http_session(http.url, a.token) as sa:
                    assert [one["message_id"] for one in
                            mail_of(await sa.call_tool("check_mail", {}))] == [to_a]
                    assert await state_of(client, to_a) == MessageState.CLAIMED
                # a's MCP session ended; the server process and b's session go on
                await until_state(client, to_a, MessageState.RELEASED)
                assert await state_of(client, to_b) == MessageState.CLAIMED
                async with http_session(http.url, a.token) as again:
                    assert [one["message_id"] for one in
                            mail_of(await again.call_tool("check_mail", {}))] == [to_a]
                    assert mail_of(await again.call_tool("check_mail", {})) == []
                assert mail_of(await sb.call_tool("check_mail", {})) == []
            assert await state_of(client, to_a) == MessageState.CONSUMED
            assert await state_of(client, to_b) == MessageState.CONSUMED

    run(go(), timeout=120)
