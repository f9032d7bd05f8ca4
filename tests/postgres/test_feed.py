"""The PostgreSQL store without rows every write touches: the feed numbered in commit order
as readers see it (a transaction still running holds back what committed after it began),
write transactions of a shared store committing side by side, and a version-2 store (the
feed in ``rows``, the row counts in ``sizes``) upgraded with its feed numbers kept."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from treemail import open_engine
from treemail.adapters.store.codec import encode
from treemail.adapters.store.factory import open_store
from treemail.adapters.store.leases import leases_of
from treemail.adapters.store.postgres_schema import VERSION
from treemail.adapters.store.postgres_store import split_url
from treemail.adapters.store.verify import verify
from treemail.core import keys
from treemail.core.keys import CounterName
from treemail.core.records import AgentSpec, Event, Owner
from treemail.core.store import Store, WriteTxn
from treemail.testing.postgres import PostgresCluster
from treemail.testing.store_sample import CHILD, ROOT, populate


def _connect(url: str) -> tuple[psycopg.Connection[Any], str]:
    conninfo, schema = split_url(url)
    return psycopg.connect(conninfo), f'"{schema}"'


def _feed(store: Store) -> list[tuple[int, str]]:
    with store.read() as tx:
        return [(n, e.kind) for n, e in tx.feed()]


def test_an_event_committed_while_an_older_writer_runs_waits_behind_that_writer(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url()
    store = open_store(url, sync=False)
    try:
        store.transact(populate)
        before = _feed(store)
        # An older writer: its transaction id is taken before the store's next write begins.
        older, schema = _connect(url)
        older.execute("SELECT pg_current_xact_id()")
        store.transact(lambda tx: tx.append(ROOT, "later", {}))
        # Committed, in the session's log at once; not in the feed while the older one runs,
        # since the older one may still append an event that orders before it.
        with store.read() as tx:
            assert [e.kind for e in tx.events(ROOT)][-1] == "later"
            assert tx.feed_end() == len(before)
        assert _feed(store) == before
        event = Event(CHILD, 99, "older", {})
        key = keys.event(CHILD, 99)
        older.execute(f"INSERT INTO {schema}.rows VALUES ('events', %s, %s)",
                      (key, encode(event, key)))
        older.execute(f"INSERT INTO {schema}.feed (xid, idx, event) VALUES "
                      "(pg_current_xact_id(), 0, %s)", (key,))
        older.commit()
        older.close()
        # Both now, the older writer's first: no reader saw "later" at a number that
        # "older" then took.
        n = len(before)
        assert _feed(store)[n:] == [(n + 1, "older"), (n + 2, "later")]
        with store.read() as tx:
            assert tx.feed_end() == n + 2
            assert [k for _, k in _feed(store)] == [k for _, k in before] + ["older", "later"]
    finally:
        store.close()


def test_two_transactions_of_a_shared_store_commit_side_by_side(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url() + "&writers=2"
    store = open_store(url, sync=False, shared=True)
    try:
        leases_of(store).join("/run/a.sock", 30.0)
        inside, other_done = threading.Event(), threading.Event()

        def slow(tx: WriteTxn) -> int:
            tx.add(CounterName("slow"), 1)
            inside.set()
            # Only returns once another transaction committed while this one is open.
            assert other_done.wait(30), "the other transaction waited behind this one"
            return tx.count(CounterName("slow"))

        results: list[int] = []
        worker = threading.Thread(target=lambda: results.append(store.transact(slow)))
        worker.start()
        assert inside.wait(30)
        store.transact(lambda tx: tx.add(CounterName("quick"), 1))
        other_done.set()
        worker.join(30)
        assert results == [1]
        with store.read() as tx:
            assert (tx.count(CounterName("slow")), tx.count(CounterName("quick"))) == (1, 1)
    finally:
        store.close()


def test_a_version_2_store_is_upgraded_with_its_feed_numbers_kept(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url()
    engine = open_engine(url)
    lead = engine.create_root(AgentSpec("lead", "plans"))
    engine.accept(lead.session_id, "Fix the parser.", Owner.USER)
    want = _feed(engine.store)
    with engine.store.read() as tx:  # numbered as readers see it, numberer or not
        rows = [(n, keys.event(e.session_id, e.seq)) for n, e in tx.feed()]
    engine.store.close()
    # The store as version 2 kept it: the feed in rows (number -> the event's key), and
    # each table's row count in sizes.
    conn, schema = _connect(url)
    conn.execute(f"DROP TABLE {schema}.feed")
    for n, event in rows:
        key = keys.feed(n)
        conn.execute(f"INSERT INTO {schema}.rows VALUES ('feed', %s, %s)",
                     (key, encode(event, key)))
    conn.execute(f"CREATE TABLE {schema}.sizes (tbl text PRIMARY KEY, n bigint NOT NULL)")
    conn.execute(f"INSERT INTO {schema}.sizes SELECT tbl, count(*) FROM {schema}.rows "
                 "GROUP BY tbl")
    conn.execute(f"UPDATE {schema}.meta SET value = '2' WHERE key = 'version'")
    conn.commit()
    store = open_store(url, sync=False)
    try:
        assert _feed(store) == want and len(want) > 2
        store.transact(lambda tx: tx.append(lead.session_id, "after", {}))
        assert _feed(store) == [*want, (len(want) + 1, "after")]
        assert verify(store).problems == []  # type: ignore[arg-type]
        version = conn.execute(f"SELECT value FROM {schema}.meta WHERE key = 'version'")
        assert version.fetchone() == (str(VERSION),)
        left = conn.execute(f"SELECT to_regclass('{schema}.sizes'), count(*) FROM "
                            f"{schema}.rows WHERE tbl = 'feed'").fetchone()
        assert left == (None, 0)
    finally:
        conn.close()
        store.close()
