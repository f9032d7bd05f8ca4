"""External sessions on daemons sharing a PostgreSQL store: every external.* write goes to
the daemon owning the session's tree. Elsewhere it is answered ``daemon:not_owner`` naming
that daemon; an MCP server's link binds there, and binds again where the tree went after a
takeover. Real daemon subprocesses, a real server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import data_dir, make_tree
from tests.postgres.test_failover import _leases
from treemail.adapters.daemon.client import RpcFailure
from treemail.adapters.daemon.errors import NotOwner
from treemail.adapters.mcp.links import Links
from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.store.factory import open_store
from treemail.core.engine import Engine
from treemail.core.events import EventKind
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.methods import Call
from treemail.testing.postgres import PostgresCluster

LEASE = 1.5


def cluster_daemon(base: Path, url: str, agents: Mapping[str, str] | None = None
                   ) -> DaemonProcess:
    """A daemon sharing the store at ``url`` with a short lease, its data dir at ``base``
    holding ``agents`` (name -> agent doc) beside the defaults."""
    data_dir(base)
    for name, doc in (agents or {}).items():
        (base / "agents" / f"{name}.md").write_text(doc)
    base.chmod(0o700)
    (base / "config.toml").write_text(f"[daemon.cluster]\nlease_seconds = {LEASE}\n")
    return DaemonProcess(base, "--store", url)


@contextlib.contextmanager
def two_daemons(url: str, where: Path, agents: Mapping[str, str] | None = None
                ) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """Two daemons on one store; both killed at the end (a stopped one woken first)."""
    first = cluster_daemon(where / "a", url, agents)
    second = cluster_daemon(where / "b", url, agents)
    try:
        yield first, second
    finally:
        for daemon in (first, second):
            if daemon.proc.poll() is None:
                os.kill(daemon.proc.pid, signal.SIGCONT)
            daemon.kill()


@pytest.fixture
def pair(postgres_cluster: PostgresCluster, tmp_path: Path
         ) -> Iterator[tuple[str, DaemonProcess, DaemonProcess]]:
    url = postgres_cluster.url()
    with two_daemons(url, tmp_path) as (first, second):
        yield url, first, second


def _send(n: int, to: str) -> x.ExternalCallParams:
    return x.ExternalCallParams(tool_call_id=f"call-{n}", name="send_message",
                                arguments={"to": to, "body": f"note {n}"})


def _not_owner(failure: RpcFailure) -> str:
    data = failure.error.data
    assert data is not None and data.code == NotOwner.code, failure
    return str(data.details["owner"])


def _until(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.05)


def test_external_writes_go_to_the_trees_owner_and_follow_it_after_a_takeover(
    pair: tuple[str, DaemonProcess, DaemonProcess],
) -> None:
    url, a, b = pair

    async def scenario() -> tuple[str, list[str]]:
        client = await a.client()
        try:
            tree = await make_tree(client, externals=1)
            member = tree.members[0]
            holder = _leases(url)[tree.lead_id][0]
            owner, other = (a, b) if holder == str(a.socket) else (b, a)
            elsewhere = await other.client()
            refused: list[str] = []
            try:
                calls: list[Call[Any, Any]] = [
                    Call(m.EXTERNAL_ATTACH, x.ExternalAttachParams(
                        parent_session_id=tree.lead_id, agent="worker")),
                    Call(m.EXTERNAL_TOKENS_ISSUE,
                         x.ExternalTokenIssueParams(session_id=member.session_id)),
                    Call(m.EXTERNAL_TOKENS_REVOKE,
                         x.ExternalTokenRevokeParams(token_id=member.token_id)),
                    Call(m.EXTERNAL_BIND, x.ExternalBindParams(token=member.token))]
                for call in calls:
                    with pytest.raises(RpcFailure) as caught:
                        await elsewhere.request(call.method, call.params, follow=False)
                    refused.append(_not_owner(caught.value))
            finally:
                await elsewhere.close()
            assert refused == [str(owner.socket)] * 4

            # An MCP server's link, opened at the daemon that does not own the tree, binds
            # where the tree is, and its calls act there.
            links = Links(lambda: other.client())
            link = await links.get(member.token)
            first = json.loads((await link.request(m.EXTERNAL_CALL, _send(1, tree.lead))
                                ).content)["message_id"]

            # The owner stalls past its lease: the other daemon takes the tree over. Back,
            # the stalled daemon learns it lost the tree and refuses the bound call.
            os.kill(owner.proc.pid, signal.SIGSTOP)
            await asyncio.to_thread(_until, lambda: _leases(url)[tree.lead_id][:2] == (
                str(other.socket), 2), "taken over")
            os.kill(owner.proc.pid, signal.SIGCONT)
            log = owner.data_dir / "daemon.log"
            await asyncio.to_thread(_until, lambda: "lost trees" in log.read_text(),
                                    "told of the loss")
            with pytest.raises(RpcFailure) as caught:  # the tools too: not the owner's now
                await link.request(m.EXTERNAL_TOOLS, t.Empty())
            assert _not_owner(caught.value) == str(other.socket)
            with pytest.raises(RpcFailure) as caught:
                await link.request(m.EXTERNAL_CALL, _send(2, tree.lead))
            assert _not_owner(caught.value) == str(other.socket)
            assert link.broken  # so the next call binds again, at the new owner
            link = await links.get(member.token)
            second = json.loads((await link.request(m.EXTERNAL_CALL, _send(3, tree.lead))
                                 ).content)["message_id"]
            await links.close()

            return tree.lead_id, [first, second]
        finally:
            await client.close()

    lead, sent = run(scenario(), timeout=120)
    engine = Engine(open_store(url, readonly=True), UuidIds())
    try:  # each acknowledged send stored once; the refused one not at all
        accepted = [(str(e.data["message_id"]), e.data["body"]) for e in engine.events(lead)
                    if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED]
    finally:
        engine.store.close()
    assert accepted == [(sent[0], "note 1"), (sent[1], "note 3")]
