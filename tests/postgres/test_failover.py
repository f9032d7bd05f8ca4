"""Two daemons on one PostgreSQL database: disjoint trees, placement and redirects, and a
fenced failover when one is killed under traffic. Real daemon subprocesses, a real server.

The daemons run with a short lease (``[daemon.cluster] lease_seconds``) and a slow scripted
model, so that the killed daemon dies with mail accepted and not yet delivered; the test
then shows every acknowledged send delivered exactly once, by the survivor."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.postgres.mail import delivered_once
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.store.postgres_store import split_url
from treemail.protocol.methods import RUN_SUBMIT, SESSION_CREATE
from treemail.protocol.types import RunSubmitParams, SessionCreateParams
from treemail.testing.postgres import PostgresCluster

LEASE = 1.5  # seconds: the survivor takes over about this long after the kill
TREES = 4
SENDS = 6  # per tree


def _config(data_dir: Path) -> Path:
    data_dir.mkdir(mode=0o700)
    (data_dir / "config.toml").write_text(
        f"[daemon.cluster]\nlease_seconds = {LEASE}\n\n[daemon.scripted]\ndelay = 0.2\n")
    return data_dir


def _leases(url: str) -> dict[str, tuple[str, int, bool]]:
    """Each tree's lease: the holder's address, the token, whether it is live."""
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(f'SELECT tree, address, token, expires > clock_timestamp() '
                            f'FROM "{schema}".leases').fetchall()
    return {str(tree): (str(address), int(token), bool(live))
            for tree, address, token, live in rows}


@pytest.fixture
def pair(postgres_cluster: PostgresCluster, tmp_path: Path
         ) -> Iterator[tuple[str, DaemonProcess, DaemonProcess]]:
    url = postgres_cluster.url()
    first = DaemonProcess(_config(tmp_path / "a"), "--store", url)
    second = DaemonProcess(_config(tmp_path / "b"), "--store", url)
    yield url, first, second
    first.kill()
    second.kill()


async def _send(client: DaemonClient, tree: str, n: int) -> str:
    """One acknowledged send (run.submit with an idempotency key): retried, with the same
    key, until a daemon that owns the tree acknowledges it. A retry after an unknown
    outcome is answered with the first result, so a send is stored once whatever happened
    to the attempts before."""
    while True:
        try:
            accepted = await client.request(RUN_SUBMIT, RunSubmitParams(
                session_id=tree, text=f"mail {n} to {tree}", idempotency_key=f"{tree}-{n}"))
            return accepted.message_id
        except (RpcFailure, OSError):
            await asyncio.sleep(0.05)  # its owner is dead and the lease not yet run out


def test_two_daemons_own_disjoint_trees_and_the_survivor_takes_over_a_killed_one(
    pair: tuple[str, DaemonProcess, DaemonProcess],
) -> None:
    url, a, b = pair

    async def scenario() -> tuple[list[str], dict[str, list[str]], float]:
        client = await b.client()  # B's client: redirected to A for A's trees
        try:
            trees = [(await client.request(SESSION_CREATE, SessionCreateParams(
                agent="default"))).session_id for _ in range(TREES)]
            owners = _leases(url)
            by_a = [t for t in trees if owners[t][0] == str(a.socket)]
            by_b = [t for t in trees if owners[t][0] == str(b.socket)]
            # Placement: fewest live trees first, so four trees go two and two.
            assert (len(by_a), len(by_b)) == (2, 2), owners
            sent: dict[str, list[str]] = {t: [] for t in trees}
            for n in range(SENDS // 2):  # traffic to both: A's trees by redirect
                for tree in trees:
                    sent[tree].append(await _send(client, tree, n))
            a.kill()  # kill -9, with A's mail accepted and (slow model) not all delivered
            killed = time.monotonic()
            for n in range(SENDS // 2, SENDS):  # traffic on: refused until B takes over
                for tree in trees:
                    sent[tree].append(await _send(client, tree, n))
            return by_a, sent, time.monotonic() - killed
        finally:
            await client.close()

    by_a, sent, took = run(scenario(), timeout=120)
    # B owns A's trees now, under a raised token: a write of A's old token is fenced
    # (tests/postgres/test_leases.py shows the refusal on the store itself).
    owners = _leases(url)
    assert {owners[t][:2] for t in by_a} == {(str(b.socket), 2)}

    delivered_once(url, sent)
    print(f"failover: {sum(map(len, sent.values()))} sends acknowledged over {TREES} trees, "
          f"{len(by_a)} taken over {took:.1f} s after the kill (lease {LEASE} s), each "
          "delivered once")
    code, err = b.terminate()
    assert code == 0, err
    assert "took over trees" in err
