"""No MCP client chooses who it is: identity is the token bound at launch (stdio) or carried
by each request (HTTP), checked by the daemon. Every attempt to be someone else fails with a
typed error and leaves no mail behind: a forged sender argument, another session's token on
an MCP session, a revoked token, a token of another tree or of no session here, no token."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import (
    ROOT,
    HttpServer,
    answer,
    make_tree,
    stdio_session,
    token_file,
    user_tree,
)
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.errors import ExternalScope
from treemail.core.errors import (
    InvalidArguments,
    NotTreePeer,
    SessionTokenRevoked,
    UnknownSubagentReference,
)
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t


async def agent_mail(client: DaemonClient, session_id: str) -> list[str]:
    listed = await client.every(m.MESSAGE_LIST, t.MessageListParams(session_id=session_id))
    return [one.body for one in listed if one.owner == "agent"]


def launch(daemon: DaemonProcess, token_path: Path) -> tuple[int, str]:
    """``treemail mcp --token-file`` on its own: a bad token ends it before any MCP."""
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "mcp", "--data-dir", str(daemon.data_dir),
         "--token-file", str(token_path)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT, timeout=60)
    return done.returncode, done.stderr


@pytest.mark.parametrize("forged", ["from", "sender", "session_id", "recipient_session_id"])
def test_a_forged_sender_argument_is_refused_and_sends_nothing(
    daemon: DaemonProcess, tmp_path: Path, forged: str,
) -> None:
    async def go() -> None:
        async with user_tree(daemon) as (client, tree):
            a, b = tree.members
            async with stdio_session(daemon, token_file(tmp_path, a.token)) as session:
                refused = await session.call_tool("send_message", {
                    "to": tree.lead, "body": "as B", forged: b.session_id})
                assert refused.is_error
                assert answer(refused)["error"] == InvalidArguments.code
            assert await agent_mail(client, tree.lead_id) == []

    run(go(), timeout=60)


def test_another_sessions_token_on_an_mcp_session_is_refused(
    daemon: DaemonProcess, http: HttpServer,
) -> None:
    async def go() -> None:
        async with user_tree(daemon) as (client, tree):
            a, b = tree.members
            bearer = {"Authorization": f"Bearer {a.token}"}
            async with httpx2.AsyncClient(headers=bearer, timeout=60) as web, \
                    streamable_http_client(http.url, http_client=web) as (r, w, *_), \
                    ClientSession(r, w) as session:
                await session.initialize()
                await session.list_tools()  # the MCP session is A's from here on
                web.headers["Authorization"] = f"Bearer {b.token}"
                # The SDK keeps an HTTP session to the token that opened it: B's token
                # finds no such session. (Were it let through, the server refuses it
                # with external:out_of_scope; A's stdio server has no way to take it.)
                with pytest.raises(MCPError, match="Session not found"):
                    await session.call_tool("send_message",
                                            {"to": tree.lead, "body": "as B?"})
            assert await agent_mail(client, tree.lead_id) == []

    run(go(), timeout=60)


def test_a_revoked_token_is_refused_at_launch_mid_session_and_over_http(
    daemon: DaemonProcess, http: HttpServer, tmp_path: Path,
) -> None:
    async def go() -> None:
        async with user_tree(daemon) as (client, tree):
            a, b = tree.members
            async with stdio_session(daemon, token_file(tmp_path, a.token)) as session:
                sent = answer(await session.call_tool("send_message",
                                                      {"to": tree.lead, "body": "before"}))
                assert "message_id" in sent
                await client.request(m.EXTERNAL_TOKENS_REVOKE,
                                     x.ExternalTokenRevokeParams(token_id=a.token_id))
                refused = await session.call_tool("send_message",
                                                  {"to": tree.lead, "body": "after"})
                assert refused.is_error
                assert answer(refused)["error"] == SessionTokenRevoked.code
            assert await agent_mail(client, tree.lead_id) == ["before"]
            listed = await client.request(m.EXTERNAL_TOKENS_LIST,
                                          x.ExternalTokensListParams(session_id=a.session_id))
            assert [(one.token_id, one.revoked) for one in listed.tokens] == [
                (a.token_id, True)]
            await client.request(m.EXTERNAL_TOKENS_REVOKE,
                                 x.ExternalTokenRevokeParams(token_id=b.token_id))
            async with httpx2.AsyncClient(timeout=60) as web:
                answered = await web.post(http.url, headers={
                    "Authorization": f"Bearer {b.token}",
                    "Accept": "application/json, text/event-stream"}, json={
                    "jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert answered.status_code == 401
            assert "invalid_token" in answered.headers.get("www-authenticate", "")

    run(go(), timeout=60)


def test_launching_with_a_revoked_or_unknown_token_fails_before_any_mcp(
    daemon: DaemonProcess, tmp_path: Path,
) -> None:
    async def tree_tokens() -> tuple[str, str]:
        async with user_tree(daemon, externals=1) as (client, tree):
            member = tree.members[0]
            await client.request(m.EXTERNAL_TOKENS_REVOKE,
                                 x.ExternalTokenRevokeParams(token_id=member.token_id))
            return member.token, tree.lead_id

    revoked, lead = run(tree_tokens())
    code, err = launch(daemon, token_file(tmp_path, revoked, "revoked"))
    assert code == 1 and "[external:token_revoked]" in err, err
    # A hosted session's id, a session of no data directory here: neither binds anyone.
    for name, forged in (("hosted", f"tmx.{lead}.{'x' * 43}"),
                         ("elsewhere", f"tmx.{uuid.uuid4()}.{'x' * 43}"),
                         ("garbage", "not a token")):
        code, err = launch(daemon, token_file(tmp_path, forged, name))
        assert code == 1 and "[external:unknown_token]" in err, (name, err)


def test_a_token_of_another_tree_reaches_only_its_own_tree(
    daemon: DaemonProcess, tmp_path: Path,
) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            mine, theirs = await make_tree(client), await make_tree(client)
            outsider = theirs.members[0]
            async with stdio_session(daemon, token_file(tmp_path, outsider.token)) as session:
                by_id = await session.call_tool("send_message",
                                                {"to": mine.lead_id, "body": "hi"})
                by_handle = await session.call_tool(
                    "send_message", {"to": mine.members[0].handle, "body": "hi"})
                assert answer(by_id)["error"] == NotTreePeer.code
                assert answer(by_handle)["error"] == UnknownSubagentReference.code
            assert await agent_mail(client, mine.lead_id) == []
            assert await agent_mail(client, mine.members[0].session_id) == []
        finally:
            await client.close()

    run(go(), timeout=60)


def test_no_token_no_service(daemon: DaemonProcess, http: HttpServer) -> None:
    async def go() -> None:
        async with httpx2.AsyncClient(timeout=60) as web:
            answered = await web.post(http.url, headers={
                "Accept": "application/json, text/event-stream"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert answered.status_code == 401
        assert "Bearer" in answered.headers.get("www-authenticate", "")
        client = await daemon.client()  # the user's connection is bound to no session
        try:
            with pytest.raises(RpcFailure) as refused:
                await client.request(m.EXTERNAL_CHECK_MAIL, t.Empty())
            assert refused.value.data_code == ExternalScope.code
        finally:
            await client.close()

    run(go(), timeout=60)
    usage = subprocess.run([sys.executable, "-m", "treemail", "mcp"], capture_output=True,
                           text=True, cwd=ROOT, timeout=60)
    assert usage.returncode == 2 and "--token-file" in usage.stderr


def test_a_bound_connection_is_that_session_and_nothing_more(daemon: DaemonProcess) -> None:
    async def go() -> None:
        client = await daemon.client()
        bound = await daemon.client()
        try:
            tree = await make_tree(client, externals=1)
            await bound.request(m.EXTERNAL_BIND,
                                x.ExternalBindParams(token=tree.members[0].token))
            for method, params in ((m.SESSION_LIST.name, {}),
                                   (m.RUN_SUBMIT.name, {"session_id": tree.lead_id, "text": "x"}),
                                   (m.APPROVAL_LIST.name, {}),
                                   (m.EXTERNAL_BIND.name, {"token": tree.members[0].token})):
                with pytest.raises(RpcFailure) as refused:
                    await bound.call_raw(method, params)  # each refused on purpose
                assert refused.value.data_code == ExternalScope.code, method
        finally:
            await bound.close()
            await client.close()

    run(go(), timeout=60)
