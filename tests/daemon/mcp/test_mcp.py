"""MCP agents in a tree, through the real stack: the ``mcp`` SDK's client, ``treemail mcp``
(over stdio and over streamable HTTP), and a daemon subprocess. Two external agents and the
hosted lead (the daemon's scripted model) exchange mail; each envelope names its true sender;
what check_mail returned is consumed by the agent's next call, once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import (
    HttpServer,
    answer,
    mail_of,
    mcp_client,
    state_of,
    stdio_session,
    text,
    token_file,
    user_tree,
)
from treemail.adapters.daemon.client import DaemonClient
from treemail.core.errors import InvalidToolArguments, UnknownTool
from treemail.core.lifecycle import MessageState
from treemail.core.tools import function_parameters


async def mail_until(session: ClientSession, count: int,
                     timeout: float = 30) -> list[dict[str, Any]]:
    """check_mail until ``count`` messages came in all (each call consumes the last's)."""
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while len(got) < count:
            got += mail_of(await session.call_tool("check_mail", {}))
            if len(got) < count:
                await asyncio.sleep(0.05)
    return got


async def states(client: DaemonClient, ids: list[str]) -> list[str]:
    return [await state_of(client, i) for i in ids]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_two_external_agents_and_a_hosted_one_exchange_mail(
    daemon: DaemonProcess, http: HttpServer, tmp_path: Path, transport: str,
) -> None:
    async def go() -> None:
        async with user_tree(daemon) as (client, tree):
            a, b = tree.members
            heard: list[str] = []
            async with mcp_client(transport, daemon, a.token, tmp_path, http=http,
                                  heard=heard) as sa, \
                    mcp_client(transport, daemon, b.token, tmp_path, http=http) as sb:
                listed = {t.name: t for t in (await sa.list_tools()).tools}
                assert set(listed) == {"check_mail", "send_message", "get_subagent_result",
                                       "message_status", "cancel_message"}
                assert listed["send_message"].input_schema == function_parameters(
                    "send_message")  # the hosted agents' own schema
                sent = answer(await sa.call_tool("send_message",
                                                 {"to": b.handle, "body": "hello B"}))
                to_lead = answer(await sa.call_tool("send_message",
                                                    {"to": tree.lead, "body": "hello lead"}))
                assert "message_id" in sent and "message_id" in to_lead, (sent, to_lead)

                got_b = await mail_until(sb, 1)
                assert [m["message_id"] for m in got_b] == [sent["message_id"]]
                assert got_b[0]["text"] == (
                    f'<agent_message from="{a.handle}">\nhello B\n\n'
                    f'[use `send_message(to="{a.handle}", ...)` to reply]\n</agent_message>')
                assert await states(client, [sent["message_id"]]) == [MessageState.CLAIMED]
                reply = answer(await sb.call_tool("send_message",
                                                  {"to": a.handle, "body": "Re: hello B"}))
                # B's next call consumed what its check_mail returned, exactly once.
                assert await states(client, [sent["message_id"]]) == [MessageState.CONSUMED]

                got_a = await mail_until(sa, 2)  # B's reply and the lead's answer
                senders = sorted(m["text"].split('"')[1] for m in got_a)
                assert senders == sorted([b.handle, tree.lead])
                assert reply["message_id"] in {m["message_id"] for m in got_a}
                await sa.call_tool("check_mail", {})  # consumes, and finds nothing new
                ids = [m["message_id"] for m in got_a]
                assert await states(client, ids) == [MessageState.CONSUMED, MessageState.CONSUMED]
                # New mail is announced without a poll: A's client heard its mail box
                # change (the announcement may trail the mail it announces).
                async with asyncio.timeout(20):
                    while f"treemail://mail/{a.session_id}" not in heard:
                        await asyncio.sleep(0.05)
                assert set(heard) == {f"treemail://mail/{a.session_id}"}  # never B's

    run(go(), timeout=120)


def test_without_a_message_rule_send_message_is_not_listed_nor_callable(
    daemon: DaemonProcess, tmp_path: Path,
) -> None:
    async def go() -> None:
        async with user_tree(daemon, externals=1, agent="mute") as (_, tree):
            path = token_file(tmp_path, tree.members[0].token)
            async with stdio_session(daemon, path) as session:
                names = [t.name for t in (await session.list_tools()).tools]
                assert names[0] == "check_mail" and "send_message" not in names, names
                refused = await session.call_tool("send_message",
                                                  {"to": tree.lead, "body": "hi"})
                assert refused.is_error
                assert answer(refused)["error"] == UnknownTool.code

    run(go(), timeout=60)


def test_check_mail_takes_no_arguments_and_says_so(daemon: DaemonProcess,
                                                   tmp_path: Path) -> None:
    async def go() -> None:
        async with user_tree(daemon, externals=1) as (_, tree):
            path = token_file(tmp_path, tree.members[0].token)
            async with stdio_session(daemon, path) as session:
                refused = await session.call_tool("check_mail", {"as": tree.lead})
                assert refused.is_error
                assert answer(refused)["error"] == InvalidToolArguments.code
                assert "no arguments" in text(refused)

    run(go(), timeout=60)



