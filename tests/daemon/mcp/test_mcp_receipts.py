"""Receipts, recall and expiry through the real stack: the ``mcp`` SDK's client drives
``treemail mcp`` (stdio and streamable HTTP) against a daemon subprocess. Two external agents
and the hosted lead: a sender follows its mail by receipt until consumed, recalls mail nobody
has read, and is told too late once a check_mail claimed it; a cancel racing a claim has
exactly one winner. The user's connection has the same operations as wire methods."""

from __future__ import annotations

import asyncio
import time
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
    sent_by,
    stdio_session,
    token_file,
)
from tests.daemon.mcp.test_mcp import mail_until
from treemail.adapters.daemon.client import RpcFailure
from treemail.core.errors import CancelTooLate, UnknownSentMessage
from treemail.core.events import EventKind
from treemail.core.lifecycle import MessageState
from treemail.protocol import methods as m
from treemail.protocol import receipts as rc
from treemail.protocol import types as t


async def receipt(session: Any, message_id: str) -> dict[str, Any]:
    return answer(await session.call_tool("message_status", {"message_id": message_id}))


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_two_external_agents_and_the_hosted_lead_with_receipts(
    daemon: DaemonProcess, http: HttpServer, tmp_path: Path, transport: str,
) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            tree = await make_tree(client)
            a, b = tree.members
            async with mcp_client(transport, daemon, a.token, tmp_path, http=http) as sa, \
                    mcp_client(transport, daemon, b.token, tmp_path, http=http) as sb:
                names = {tool.name for tool in (await sa.list_tools()).tools}
                assert {"message_status", "cancel_message"} <= names
                # Recalled before anyone read it: B never sees it.
                early = answer(await sa.call_tool("send_message", {"to": b.handle,
                                                                   "body": "never mind"}))
                assert (await receipt(sa, early["message_id"]))["state"] in (
                    MessageState.ACCEPTED, MessageState.ADMITTED)
                cancelled = answer(await sa.call_tool(
                    "cancel_message", {"message_id": early["message_id"]}))
                assert (cancelled["state"], cancelled["final"], cancelled["reason"]) == (
                    MessageState.DISCARDED, True, "cancelled by sender")
                assert mail_of(await sb.call_tool("check_mail", {})) == []
                # Read by B: a claim wins over a later cancel, then B's next call consumes.
                kept = answer(await sa.call_tool("send_message", {"to": b.handle,
                                                                  "body": "hello B"}))
                got = await mail_until(sb, 1)
                assert [one["message_id"] for one in got] == [kept["message_id"]]
                assert (await receipt(sa, kept["message_id"]))["state"] == MessageState.CLAIMED
                late = await sa.call_tool("cancel_message", {"message_id": kept["message_id"]})
                assert late.is_error and answer(late)["error"] == CancelTooLate.code
                # Only the sender has a receipt: B asking about A's mail learns nothing.
                foreign = await sb.call_tool("message_status",
                                             {"message_id": kept["message_id"]})
                assert foreign.is_error
                assert answer(foreign)["error"] == UnknownSentMessage.code
                assert (await receipt(sa, kept["message_id"]))["state"] == MessageState.CONSUMED
                # The hosted lead reads its mail in a run of its own: followed by receipt.
                to_lead = answer(await sa.call_tool("send_message", {"to": tree.lead,
                                                                     "body": "status?"}))
                async with asyncio.timeout(30):
                    while ((await receipt(sa, to_lead["message_id"]))["state"]
                           != MessageState.CONSUMED):
                        await asyncio.sleep(0.05)
        finally:
            await client.close()

    run(go(), timeout=120)


def test_a_cancel_racing_a_claim_has_one_winner(daemon: DaemonProcess, tmp_path: Path,
                                                http: HttpServer) -> None:
    """The sender's cancel and the recipient's check_mail sent together: either the cancel
    won (reason "cancelled by sender", B never gets it) or the claim did (too late, and B
    has it, consumed by its next call), never both and never neither."""

    async def go() -> None:
        client = await daemon.client()
        try:
            tree = await make_tree(client)
            a, b = tree.members
            winners = set()
            async with mcp_client("http", daemon, a.token, tmp_path, http=http) as sa, \
                    mcp_client("http", daemon, b.token, tmp_path, http=http) as sb:
                for round_ in range(6):
                    sent = answer(await sa.call_tool("send_message", {
                        "to": b.handle, "body": f"race {round_}"}))
                    mid = sent["message_id"]
                    cancel, checked = await asyncio.gather(
                        sa.call_tool("cancel_message", {"message_id": mid}),
                        sb.call_tool("check_mail", {}))
                    read = [one["message_id"] for one in mail_of(checked)]
                    await sb.call_tool("check_mail", {})  # consumes what B read
                    final = await receipt(sa, mid)
                    if cancel.is_error:
                        assert answer(cancel)["error"] == CancelTooLate.code
                        assert read == [mid] and final["state"] == MessageState.CONSUMED
                        winners.add("claim")
                    else:
                        assert read == [] and final["reason"] == "cancelled by sender"
                        winners.add("cancel")
            assert winners  # each round had exactly one winner, checked above
        finally:
            await client.close()

    run(go(), timeout=120)


def test_the_user_asks_and_cancels_as_a_sender_over_rpc(daemon: DaemonProcess) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            tree = await make_tree(client, externals=2)
            a, b = tree.members
            sent = await sent_by(daemon, a.token, b.handle, "over the wire")
            asked = rc.SentMessageParams(session_id=a.session_id, message_id=sent)
            status = await client.request(m.MESSAGE_STATUS, asked)
            assert (status.state, status.final, status.recipient_session_id) == (
                MessageState.ADMITTED, False, b.session_id)
            with pytest.raises(RpcFailure) as other:
                await client.request(m.MESSAGE_STATUS, rc.SentMessageParams(
                    session_id=b.session_id, message_id=sent))
            assert other.value.data_code == UnknownSentMessage.code
            with pytest.raises(RpcFailure) as nothing:
                await client.request(m.MESSAGE_CANCEL, rc.SentMessageParams(
                    session_id=a.session_id, message_id="no-such-message"))
            assert nothing.value.data_code == UnknownSentMessage.code
            done = await client.request(m.MESSAGE_CANCEL, asked)
            assert (done.state, done.reason) == (MessageState.DISCARDED, "cancelled by sender")
            with pytest.raises(RpcFailure) as again:
                await client.request(m.MESSAGE_CANCEL, asked)
            assert again.value.data_code == CancelTooLate.code
            # The recipient's log records the discard with its reason.
            history = (await client.request(m.MESSAGE_GET, t.MessageGetParams(
                message_id=sent))).history
            assert history[-1].kind == EventKind.PRODUCER_MESSAGE_DISCARDED
            assert history[-1].reason == "cancelled by sender"
        finally:
            await client.close()

    run(go(), timeout=60)


def test_mail_left_unclaimed_past_the_ttl_expires(tmp_path: Path) -> None:
    """[messaging] message_ttl_seconds = 1: B checks its mail once a second has passed since
    A's send (the wall clock says so; no sleep stands in for it) and finds none; A's receipt
    says expired, and the log records it."""
    base = data_dir(tmp_path / "data")
    (base / "config.toml").write_text("[messaging]\nmessage_ttl_seconds = 1\n")
    daemon = DaemonProcess(base)
    try:
        async def go() -> None:
            client = await daemon.client()
            try:
                tree = await make_tree(client)
                a, b = tree.members
                before = time.time()
                sent = await sent_by(daemon, a.token, b.handle, "stale soon")
                await _until(lambda: time.time() > before + 1.05)
                path = token_file(tmp_path, b.token, "b.token")
                async with stdio_session(daemon, path) as sb:
                    assert mail_of(await sb.call_tool("check_mail", {})) == []
                status = await client.request(m.MESSAGE_STATUS, rc.SentMessageParams(
                    session_id=a.session_id, message_id=sent))
                assert (status.state, status.reason) == (MessageState.DISCARDED, "expired")
                history = (await client.request(m.MESSAGE_GET, t.MessageGetParams(
                    message_id=sent))).history
                assert (history[-1].kind, history[-1].reason) == (
                    EventKind.PRODUCER_MESSAGE_DISCARDED, "expired")
            finally:
                await client.close()

        run(go(), timeout=60)
    finally:
        code, err = daemon.terminate()
        assert code == 0, err


async def _until(condition: Any) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.02)


