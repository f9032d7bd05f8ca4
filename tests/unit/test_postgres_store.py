"""``PostgresStore`` passes the store contract, and what is its own: the owner lock, schema
versions, retries after a serialization failure or a lost connection, an unknown outcome
when the connection is lost while committing, and ``treemail verify`` on it.

Every test runs on the session's throwaway server (``postgres_cluster``), each in a schema
of its own."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from treemail import open_engine, open_store
from treemail.adapters.store.codec import encode
from treemail.adapters.store.postgres_schema import VERSION
from treemail.adapters.store.postgres_store import PostgresStore, split_url
from treemail.adapters.store.verify import main as verify_main
from treemail.adapters.store.verify import verify
from treemail.core.errors import (
    OutcomeUnknown,
    StorageError,
    StoreFormatUnknown,
    StoreLocked,
    StoreMissing,
)
from treemail.core.keys import CounterName
from treemail.core.records import AgentSpec, Owner
from treemail.core.store import Store, WriteTxn
from treemail.protocol import types as t
from treemail.protocol.methods import SESSION_CREATE, SESSION_LIST
from treemail.testing import StoreContract
from treemail.testing.postgres import PostgresCluster
from treemail.testing.store_sample import (
    populate,
)


def _sql(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run ``query`` on the store's database behind its back ({s} is its schema)."""
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(query.replace("{s}", f'"{schema}"'), params)
        return cursor.fetchall() if cursor.description is not None else []


class TestPostgresStore(StoreContract):
    opened: list[Store]
    urls: dict[Path, str]

    @pytest.fixture(autouse=True)
    def cluster(self, postgres_cluster: PostgresCluster) -> Iterator[None]:
        self.server = postgres_cluster
        self.opened, self.urls = [], {}
        yield
        for store in self.opened:
            store.close()

    def url(self, directory: Path) -> str:
        if directory not in self.urls:  # one schema per directory: reopen finds it again
            self.urls[directory] = self.server.url()
        return self.urls[directory]

    def make_store(self, directory: Path, **options: Any) -> Store:
        store = open_store(self.url(directory), sync=False, **options)
        self.opened.append(store)
        return store

    def reopen(self, store: Store, directory: Path) -> Store:
        store.close()
        return self.make_store(directory)

    def counter_names(self, store: Store) -> set[str]:
        url = next(iter(self.urls.values()))
        return {bytes(key).decode()
                for (key,) in _sql(url, "SELECT key FROM {s}.rows WHERE tbl = 'counters'")}

    # -- ownership ---------------------------------------------------------------------------

    def test_a_second_writer_is_refused_naming_the_holder(self, directory: Path) -> None:
        first = self.make_store(directory)
        first.own({"role": "treemail daemon", "socket": "/run/x.sock"})
        with pytest.raises(StoreLocked) as caught:
            open_store(self.url(directory))
        assert "treemail daemon" in str(caught.value) and "/run/x.sock" in str(caught.value)
        assert caught.value.details["holder"] == {"role": "treemail daemon",
                                                  "socket": "/run/x.sock"}
        reader = open_store(self.url(directory), readonly=True)  # readers take no lock
        reader.close()
        first.close()
        self.make_store(directory).close()  # a closed writer released it

    def test_a_writer_that_lost_its_connection_cannot_write_once_another_holds_it(
        self, directory: Path
    ) -> None:
        first = self.make_store(directory)
        first.transact(populate)
        assert isinstance(first, PostgresStore)
        # With a timeout the server waits until the backend is gone (and its lock with it):
        # without one, a loaded machine let the second open find the lock still held.
        _sql(self.url(directory), "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
             "WHERE application_name = 'treemail' AND pid <> pg_backend_pid()")
        second = open_store(self.url(directory))  # the server dropped the first one's lock
        self.opened.append(second)
        with pytest.raises(StoreLocked):
            first.transact(lambda tx: tx.add(CounterName("late"), 1))
        with second.read() as tx:
            assert tx.count(CounterName("late")) == 0

    # -- versions -------------------------------------------------------------------------------

    def test_a_missing_store_is_not_created_by_a_reader(self, directory: Path) -> None:
        with pytest.raises(StoreMissing, match="open it once as a writer"):
            open_store(self.url(directory), readonly=True)
        assert _sql(self.url(directory), "SELECT to_regclass('{s}.rows')") == [(None,)]

    @pytest.mark.parametrize(("version", "advice"), [
        (VERSION + 1, "upgrade treemail"), (0, "can no longer upgrade"), ("x", "not written")])
    def test_a_store_of_another_schema_version_is_refused_with_what_to_do(
        self, directory: Path, version: object, advice: str
    ) -> None:
        self.make_store(directory).close()
        _sql(self.url(directory), "UPDATE {s}.meta SET value = %s WHERE key = 'version'",
             (str(version),))
        for readonly in (False, True):
            with pytest.raises(StoreFormatUnknown, match=advice):
                open_store(self.url(directory), readonly=readonly)

    # -- failures -------------------------------------------------------------------------------

    def test_a_real_serialization_conflict_between_two_writers_costs_a_retry_not_a_loss(
        self, directory: Path
    ) -> None:
        # Two writers on one store is what the owner lock prevents; a raw second transaction
        # that reads and writes the same counter row stands in for one.
        store = self.make_store(directory)
        store.transact(lambda tx: tx.add(CounterName("n"), 1))
        conninfo, schema = split_url(self.url(directory))
        other = psycopg.connect(conninfo)
        other.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        entered, release = threading.Event(), threading.Event()
        attempts: list[int] = []

        def work(tx: WriteTxn) -> int:
            attempts.append(1)
            tx.count(CounterName("n"))  # read: under SERIALIZABLE the write below depends on it
            if len(attempts) == 1:
                entered.set()
                release.wait(10)
            return tx.add(CounterName("n"), 1)

        worker = threading.Thread(target=lambda: attempts.append(store.transact(work)))
        worker.start()
        assert entered.wait(10)
        row = other.execute(f'SELECT value FROM "{schema}".rows WHERE tbl = %s AND key = %s',
                            ("counters", b"n")).fetchone()
        assert row is not None
        other.execute(f'UPDATE "{schema}".rows SET value = %s WHERE tbl = %s AND key = %s',
                      (encode(5, b"n"), "counters", b"n"))
        other.commit()
        other.close()
        release.set()
        worker.join(20)
        assert len(attempts) >= 3  # the first attempt, its retry, and the result
        with store.read() as tx:
            # the retry read the other writer's 5, then added one
            assert tx.count(CounterName("n")) == 6

    @pytest.mark.parametrize("swallowed", [False, True])
    def test_a_connection_lost_before_commit_reconnects_and_runs_the_work_again(
        self, directory: Path, swallowed: bool
    ) -> None:
        store = self.make_store(directory)
        store.transact(populate)
        runs: list[int] = []

        def work(tx: WriteTxn) -> int:
            runs.append(1)
            tx.add(CounterName("n"), 1)
            if len(runs) == 1:  # the server ends this very transaction's connection
                _sql(self.url(directory), "SELECT pg_terminate_backend(pid, 10000) FROM "
                     "pg_stat_activity WHERE application_name = 'treemail' "
                     "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'")
                try:
                    tx.add(CounterName("m"), 1)
                except StorageError:
                    if not swallowed:  # a careless work goes on as if nothing happened
                        raise
            return tx.count(CounterName("n"))

        assert store.transact(work) == 1
        assert len(runs) == 2
        with store.read() as tx:
            assert (tx.count(CounterName("n")), tx.count(CounterName("m"))) == (1, 0)

    def test_a_connection_lost_while_committing_is_an_unknown_outcome(
        self, directory: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = self.make_store(directory)
        assert isinstance(store, PostgresStore)

        def commit_lost(self: psycopg.Connection[Any]) -> None:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(psycopg.Connection, "commit", commit_lost)
        with pytest.raises(OutcomeUnknown, match="may or may not be stored"):
            store.transact(lambda tx: tx.add(CounterName("n"), 1))

    def test_a_server_restart_between_sends_loses_nothing(self, directory: Path) -> None:
        engine = open_engine(self.url(directory))
        self.opened.append(engine.store)
        root = engine.create_root(AgentSpec("lead", "plans"))
        engine.accept(root.session_id, "before", Owner.USER)
        self.server.restart()
        engine.accept(root.session_id, "after", Owner.USER)  # reconnected, lock taken again
        assert [m.body for m in engine.pending(root.session_id)] == ["before", "after"]

    # -- verify -----------------------------------------------------------------------------

    def test_verify_finds_a_sound_store_sound_and_a_flipped_byte_damaged(
        self, directory: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        engine = open_engine(self.url(directory))
        store = engine.store
        self.opened.append(store)
        lead = engine.create_root(AgentSpec("lead", "plans"))
        mail = engine.accept(lead.session_id, "Fix the parser.", Owner.USER)
        assert isinstance(store, PostgresStore)
        report = verify(store)
        assert report.problems == [] and report.records > 5
        assert verify_main(self.url(directory), sys.stdout, sys.stderr) == 0
        assert "no damage found" in capsys.readouterr().out
        _sql(self.url(directory), "UPDATE {s}.rows SET value = set_byte(value, 3, "
             "get_byte(value, 3) # 1) WHERE tbl = 'messages' AND key = %s",
             (mail.encode(),))
        assert verify_main(self.url(directory), sys.stdout, sys.stderr) == 1
        assert "checksum mismatch" in capsys.readouterr().out
        with store.read() as tx, pytest.raises(StorageError, match="checksum"):
            list(tx.pending(lead.session_id))


# -- the command line and the daemon on a PostgreSQL store -------------------------------------


def test_the_demo_log_and_verify_run_on_a_postgresql_store(
    postgres_cluster: PostgresCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from treemail.adapters.ui.cli import main

    url = postgres_cluster.url()
    assert main(["demo", "--store", url]) == 0  # crash and recovery included
    demo = capsys.readouterr().out
    assert "each exactly once" in demo
    assert main(["log", "--store", url]) == 0
    rows = capsys.readouterr().out
    assert rows.count("\n") > 20 and "lead" in rows
    assert main(["verify", "--store", url]) == 0
    assert "no damage found" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # the demo needs an empty store
        main(["demo", "--store", url])
    assert "not empty" in capsys.readouterr().err


def test_a_daemon_serves_a_postgresql_store_and_an_embedded_writer_is_refused_beside_it(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    # Daemons share a PostgreSQL store (tests/postgres/test_failover.py); an embedded
    # writer, which would own every tree, is kept out while one serves it.
    from tests.daemon.conftest import DaemonProcess, run

    url = postgres_cluster.url()
    daemon = DaemonProcess(tmp_path / "data", "--store", url)
    try:
        async def sessions() -> list[t.SessionView]:
            client = await daemon.client()
            try:
                await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
                return (await client.request(SESSION_LIST, t.SessionListParams())).sessions
            finally:
                await client.close()

        assert [s.agent for s in run(sessions())] == ["default"]
        with pytest.raises(StoreLocked, match="shared by treemail daemons") as caught:
            open_store(url)
        assert str(daemon.socket) in str(caught.value)
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    reopened = open_engine(url)  # the stopped daemon let go, and its session is there
    try:
        assert [s.agent.name for s in reopened.sessions()] == ["default"]
    finally:
        reopened.store.close()


def test_a_writer_killed_mid_transaction_stores_nothing_of_it_and_frees_the_store(
    postgres_cluster: PostgresCluster,
) -> None:
    import os
    import signal
    import subprocess
    import textwrap
    import time

    url = postgres_cluster.url()
    seed = open_engine(url)
    root = seed.create_root(AgentSpec("lead", "plans"))
    seed.store.close()
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from treemail import open_engine
        from treemail.core.records import Owner
        engine = open_engine({url!r})
        def work(tx):
            for n in range(50):
                tx.add("half", 1)
            print("inside", flush=True)
            sys.stdin.read()  # killed here, the transaction open
        engine.store.transact(work)
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "inside"
        with pytest.raises(StoreLocked):  # it holds the store while it lives
            open_store(url)
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    deadline = time.monotonic() + 30
    while True:  # the server ends the dead client's backend, and its lock, once it sees EOF
        try:
            store = open_store(url)
            break
        except StoreLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        with store.read() as tx:
            assert tx.count(CounterName("half")) == 0
            assert tx.session(root.session_id) == root
    finally:
        store.close()
