"""The PostgreSQL server restarted (``pg_ctl restart``) under a daemon's traffic: the daemon
lives on, every acknowledged send is delivered exactly once, and a send caught by the
restart fails with a typed error, ``store:outcome_unknown`` where the server may have
committed it; sent again with its idempotency key, it is stored once either way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.postgres.mail import delivered_once
from treemail.adapters.daemon.client import RpcFailure
from treemail.core.errors import OutcomeUnknown, StorageError, StoreFenced
from treemail.protocol.methods import RUN_SUBMIT, SESSION_CREATE
from treemail.protocol.types import RunSubmitParams, SessionCreateParams
from treemail.testing.postgres import PostgresCluster

SENDS = 40
# What a send caught by the restart may fail with: nothing stored, or perhaps stored.
_TYPED = {StorageError.code, OutcomeUnknown.code, StoreFenced.code}


@pytest.fixture
def server() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster.start()  # its own: the session's server is not restarted
    yield cluster
    cluster.stop()


def test_a_server_restart_under_traffic_loses_and_duplicates_nothing(
    server: PostgresCluster, tmp_path: Path
) -> None:
    url = server.url()
    daemon = DaemonProcess(tmp_path / "data", "--store", url)
    failures: dict[str, list[str]] = {}

    async def traffic() -> tuple[str, dict[str, str]]:
        client = await daemon.client()
        try:
            tree = (await client.request(SESSION_CREATE,
                                         SessionCreateParams(agent="default"))).session_id
            acked: dict[str, str] = {}
            restart: asyncio.Task[None] | None = None
            for n in range(SENDS):
                if n == SENDS // 3:  # mid-traffic, the server goes down and comes back
                    restart = asyncio.create_task(asyncio.to_thread(server.restart))
                if n == 2 * SENDS // 3 and restart is not None:  # the rest after it
                    await restart
                key = f"send-{n}"
                while key not in acked:
                    try:
                        accepted = await client.request(RUN_SUBMIT, RunSubmitParams(
                            session_id=tree, text=f"mail {n}", idempotency_key=key))
                        acked[key] = accepted.message_id
                    except RpcFailure as failure:
                        failures.setdefault(str(failure.data_code), []).append(key)
                        await asyncio.sleep(0.05)
            return tree, acked
        finally:
            await client.close()

    try:
        tree, acked = run(traffic(), timeout=180)
        assert set(failures) <= _TYPED, failures  # typed, never an internal error
        delivered_once(url, {tree: list(acked.values())})
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    print(f"restart: {len(acked)} acknowledged, failures by code "
          f"{ {code: len(keys) for code, keys in failures.items()} }")
