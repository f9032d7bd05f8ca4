"""Wake-ups between daemons sharing a PostgreSQL store: LISTEN/NOTIFY, and polling for a
server without it (``[daemon.cluster] wakeups``). The store-level test shows a listener
hears another holder's feed growth and release, never its own; the daemon-level tests show
that, either way, the trees of a daemon that stops are taken by the other, and its events
are read through the other."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.store.factory import open_store
from treemail.adapters.store.leases import leases_of
from treemail.adapters.store.postgres_store import split_url
from treemail.core.keys import CounterName
from treemail.protocol.methods import EVENTS_READ, RUN_SUBMIT, SESSION_CREATE
from treemail.protocol.types import EventsReadParams, RunSubmitParams, SessionCreateParams
from treemail.testing.postgres import PostgresCluster

TREE = "00000001-0000-4000-8000-000000000000"


def _until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout}s"
        time.sleep(0.05)


def test_a_listener_hears_the_other_holders_writes_and_releases_not_its_own(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url()
    store_a = open_store(url, sync=False, shared=True)
    store_b = open_store(url, sync=False, shared=True)
    a, b = leases_of(store_a), leases_of(store_b)
    heard_a: list[str] = []
    heard_b: list[str] = []
    lock = threading.Lock()

    def into(notes: list[str]) -> Callable[[str], None]:
        def woken(note: str) -> None:
            with lock:
                notes.append(note)
        return woken

    try:
        a.join("/run/a.sock", 30.0)
        b.join("/run/b.sock", 30.0)
        a.listen(into(heard_a))
        b.listen(into(heard_b))
        _until(lambda: "" in heard_a and "" in heard_b, "listening")
        a.claim(TREE)
        # no feed growth: no wake-up
        store_a.transact(lambda tx: tx.add(CounterName("no_event"), 1))
        store_a.transact(lambda tx: tx.append(TREE, "k", {}))
        _until(lambda: f"w:{a.holder}" in heard_b, "B woken by A's event")
        a.release(TREE)
        _until(lambda: f"r:{a.holder}" in heard_b, "B woken by A's release")
        with lock:
            assert heard_b.count(f"w:{a.holder}") == 1  # the counter alone woke nobody
            assert [n for n in heard_a if n] == []  # nobody hears itself
    finally:
        store_a.close()
        store_b.close()


def _holders(url: str) -> dict[str, str]:
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(f'SELECT tree, address FROM "{schema}".leases WHERE expires > '
                            "clock_timestamp()").fetchall()
    return {str(tree): str(address) for tree, address in rows}


@pytest.fixture(params=["notify", "poll"])
def daemons(request: pytest.FixtureRequest, postgres_cluster: PostgresCluster,
            tmp_path: Path) -> Iterator[tuple[str, DaemonProcess, DaemonProcess]]:
    url = postgres_cluster.url()
    procs = []
    for name in ("a", "b"):
        data = tmp_path / name
        data.mkdir(mode=0o700)
        # A long lease: B takes A's trees because A gives them up, not because they expire.
        (data / "config.toml").write_text(
            f'[daemon.cluster]\nlease_seconds = 600\nwakeups = "{request.param}"\n')
        procs.append(DaemonProcess(data, "--store", url))
    yield url, procs[0], procs[1]
    for proc in procs:
        proc.kill()


def test_a_stopped_daemons_trees_move_to_the_other_and_its_events_read_there(
    daemons: tuple[str, DaemonProcess, DaemonProcess],
) -> None:
    url, a, b = daemons

    async def scenario() -> str:
        on_a, on_b = await a.client(), await b.client()
        try:
            trees = [(await on_a.request(SESSION_CREATE, SessionCreateParams(
                agent="default"))).session_id for _ in range(2)]
            mine = next(t for t in trees if _holders(url)[t] == str(a.socket))
            sent = await on_a.request(RUN_SUBMIT, RunSubmitParams(session_id=mine, text="hello"),
                                      follow=False)
            page = await on_b.request(EVENTS_READ, EventsReadParams(session_id=mine))
            # A's event, read through B: every daemon reads the one store.
            assert sent.message_id in {dict(e.data).get("message_id") for e in page.events}
            return mine
        finally:
            await on_a.close()
            await on_b.close()

    mine = run(scenario(), timeout=120)
    code, err = a.terminate()  # a clean stop gives A's trees up
    assert code == 0, err
    _until(lambda: _holders(url).get(mine) == str(b.socket), "A's tree taken by B")
