"""Answering a held call on daemons sharing a PostgreSQL store: ``approval.answer`` writes
into the tree of the session whose call is held, so a daemon that does not own that tree
answers ``daemon:not_owner`` naming the owner (not ``store:fenced``), the typed client
follows it, and the held call runs once, at the owner. Real daemon subprocesses, a real
server."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import make_tree
from tests.postgres.test_external_owner import _not_owner, two_daemons
from tests.postgres.test_failover import _leases
from treemail.adapters.daemon.client import RpcFailure
from treemail.adapters.mcp.links import Links
from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.store.factory import open_store
from treemail.core.engine import Engine
from treemail.core.events import EventKind
from treemail.core.records import ApprovalState
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import receipts as rc
from treemail.protocol import types as t
from treemail.testing.postgres import PostgresCluster

# An external agent whose mail to a sibling waits for the user's answer.
ASKER = """---
name: asker
description: Asks before writing to a sibling
permissions:
  message:
    parent: allow
    sibling: ask
---
You ask.
"""


@pytest.fixture
def pair(postgres_cluster: PostgresCluster, tmp_path: Path
         ) -> Iterator[tuple[str, DaemonProcess, DaemonProcess]]:
    url = postgres_cluster.url()
    with two_daemons(url, tmp_path, {"asker": ASKER}) as (first, second):
        yield url, first, second


def test_an_answer_at_the_wrong_daemon_is_redirected_and_the_held_call_runs_once(
    pair: tuple[str, DaemonProcess, DaemonProcess],
) -> None:
    url, a, b = pair

    async def scenario() -> tuple[str, str, str, list[str], t.ApprovalView, bool]:
        client = await a.client()
        try:
            tree = await make_tree(client, externals=2, agent="asker")
            sender, sibling = tree.members
            holder = _leases(url)[tree.lead_id][0]
            owner, other = (a, b) if holder == str(a.socket) else (b, a)
            links = Links(lambda: owner.client())
            link = await links.get(sender.token)
            held = await link.request(m.EXTERNAL_CALL, x.ExternalCallParams(
                tool_call_id="ask-1", name="send_message",
                arguments={"to": sibling.handle, "body": "may I?"}))
            await links.close()
            assert held.approval_id is not None, held

            elsewhere = await other.client()
            refused: list[str] = []
            try:
                calls: list[Awaitable[object]] = [
                    elsewhere.request(m.APPROVAL_ANSWER, t.ApprovalAnswerParams(
                        approval_id=held.approval_id, approve=True, scope="once"),
                        follow=False),
                    elsewhere.request(m.MESSAGE_CANCEL, rc.SentMessageParams(
                        session_id=sender.session_id, message_id="no-such-message"),
                        follow=False)]
                for call in calls:
                    try:
                        await call
                    except RpcFailure as failure:
                        refused.append(_not_owner(failure))
                # Refused before any write: the call is still held.
                pending = await elsewhere.request(m.APPROVAL_LIST, t.ApprovalListParams())
                still_held = [p.approval_id for p in pending.approvals] == [held.approval_id]
                # The typed client follows the redirect to the owner, which runs the call.
                answered = await elsewhere.request(m.APPROVAL_ANSWER, t.ApprovalAnswerParams(
                    approval_id=held.approval_id, approve=True, scope="once"))
            finally:
                await elsewhere.close()
            return str(owner.socket), sibling.session_id, held.approval_id, refused, \
                answered, still_held
        finally:
            await client.close()

    owner, sibling, approval_id, refused, answered, still_held = run(scenario(), timeout=120)
    assert refused == [owner, owner]
    assert still_held
    assert answered.approval_id == approval_id
    assert answered.state == ApprovalState.APPROVED, answered
    outcome = answered.outcome
    assert outcome is not None and outcome.error is None and outcome.result is not None
    sent = json.loads(json.dumps(outcome.result))["message_id"]
    engine = Engine(open_store(url, readonly=True), UuidIds())
    try:  # the held send stored once, in the sibling's log
        accepted = [(str(e.data["message_id"]), e.data["body"])
                    for e in engine.events(sibling)
                    if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED]
    finally:
        engine.store.close()
    assert accepted == [(sent, "may I?")]

