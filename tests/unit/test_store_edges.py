"""The LMDB store's transactions at their edges: savepoints undone over rows the transaction
had not read, nested savepoints that both had to reach LMDB, a map that fills while rows are
written below a savepoint, each LMDB failure reported as a typed error naming the step, a
record that fails to decode named by its table and key, and the owner lock's description."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, cast

import lmdb
import pytest

from treemail.adapters.store import lmdb_store
from treemail.adapters.store.codec import decode, encode
from treemail.adapters.store.lmdb_files import check_data_file
from treemail.adapters.store.lmdb_store import LmdbStore, _ReadGate
from treemail.adapters.store.lmdb_txn import LmdbTables, LmdbTxn
from treemail.adapters.store.postgres_store import PostgresStore
from treemail.core.errors import (
    OutcomeUnknown,
    StorageError,
    StoreClosed,
    StoreDamaged,
    StoreFull,
    StoreLocked,
)
from treemail.core.keys import CounterName, Table
from treemail.core.records import (
    Approval,
    IdempotencyKey,
    Mode,
    RecipientState,
    SendResult,
)
from treemail.core.store import Store, WriteTxn
from treemail.testing.store_sample import session


def _approval(approval_id: str, size: int = 0) -> Approval:
    return Approval(approval_id, "s", "r", approval_id, "send_message", {"body": "x" * size},
                    "ask")


def _ids(txn: WriteTxn) -> list[str]:
    return [approval.approval_id for approval in txn.approvals()]


class _Undone(Exception):
    """Raised inside a savepoint to undo it."""


def test_a_savepoint_undone_over_a_row_not_read_yet_leaves_the_row_as_stored(
        store: Store) -> None:
    key = IdempotencyKey("s", "r", "call")
    first = SendResult("m1", Mode.QUEUE, RecipientState.QUEUED)
    store.transact(lambda tx: tx.remember(key, first))

    def work(tx: WriteTxn) -> SendResult | None:
        # The transaction overwrites the row without reading it first, then undoes that.
        with suppress(_Undone), tx.savepoint() as inner:
            inner.remember(key, SendResult("m2", Mode.STEER, RecipientState.RUNNING))
            raise _Undone
        return tx.recall(key)

    assert store.transact(work) == first
    with store.read() as txn:
        assert txn.recall(key) == first


def test_an_inner_savepoint_undone_after_both_reached_lmdb_keeps_none_of_its_rows(
        store: Store) -> None:
    def work(tx: WriteTxn) -> list[str]:
        with tx.savepoint() as outer:
            outer.put_approval(_approval("a1"))
            assert _ids(outer) == ["a1"]  # a scan: the outer savepoint's rows reach LMDB
            with suppress(_Undone), outer.savepoint() as inner:
                inner.put_approval(_approval("a2"))
                assert _ids(inner) == ["a1", "a2"]  # and so do the inner one's
                raise _Undone
            return _ids(outer)

    assert store.transact(work) == ["a1"]
    with store.read() as txn:
        assert [approval.approval_id for approval in txn.approvals()] == ["a1"]


def test_a_map_that_fills_while_rows_are_written_below_a_savepoint_grows(
        tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False, map_size=1 << 16,
                           max_map_size=1 << 26)

    def work(tx: WriteTxn) -> list[str]:
        for n in range(40):  # more than the map holds, not yet written to LMDB
            tx.put_approval(_approval(f"big{n:02}", 4000))
        with tx.savepoint() as inner:
            inner.put_approval(_approval("small"))
            return _ids(inner)  # the scan writes the 40 below the savepoint: the map fills

    assert store.transact(work) == [*(f"big{n:02}" for n in range(40)), "small"]
    with store.read() as txn:
        assert len(list(txn.approvals())) == 41
    store.close()


def test_a_savepoint_scans_the_rows_its_transaction_wrote_before_it(store: Store) -> None:
    def work(tx: WriteTxn) -> list[str]:
        tx.put_approval(_approval("a1"))
        with tx.savepoint() as inner:  # it changed nothing itself: every row is below it
            return _ids(inner)

    assert store.transact(work) == ["a1"]


def test_the_feed_stays_dense_when_read_between_appends_of_one_transaction(
        store: Store) -> None:
    # PostgreSQL numbers a transaction's appends after its commit (``postgres_feed``): inside
    # the transaction its feed is the committed one, and only ``feed_end`` counts them.
    own = [] if isinstance(store, PostgresStore) else [1, 2]

    def work(tx: WriteTxn) -> list[int]:
        tx.append("s", "Note", {})
        assert [number for number, _ in tx.feed()] == own[:1]  # the unflushed feed
        assert tx.feed_end() == 1
        tx.append("s", "Note", {})
        assert tx.feed_end() == 2
        return [number for number, _ in tx.feed()]

    assert store.transact(work) == own
    with store.read() as txn:
        assert [number for number, _ in txn.feed()] == [1, 2]


def _fill(tx: WriteTxn) -> None:
    for n in range(40):  # about 160 KB
        tx.put_approval(_approval(f"a{n}", 4000))


def test_a_map_at_its_bound_is_a_store_full_naming_the_store(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False, map_size=1 << 16,
                           max_map_size=1 << 16)
    with pytest.raises(StoreFull) as full:
        store.transact(_fill)
    store.close()
    path = str(tmp_path / "db")
    assert full.value.message == (
        f"the store at {path!r} is full: its map reached max_map_size (65536 bytes), and "
        "nothing of this operation was stored; open it with a larger max_map_size")
    assert full.value.details == {"path": path}


def test_a_map_bound_below_the_first_map_is_refused_before_anything_is_made(
        tmp_path: Path) -> None:
    with pytest.raises(ValueError) as refused:
        LmdbStore.open(tmp_path / "db", map_size=1 << 20, max_map_size=1 << 16)
    assert str(refused.value) == "max_map_size 65536 is below map_size 1048576"
    assert not (tmp_path / "db").exists()


def test_the_map_doubles_as_it_grows(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False, map_size=1 << 16,
                           max_map_size=1 << 26)
    store.transact(_fill)
    store.close()
    grown = check_data_file(tmp_path / "db").map_size >> 16
    assert grown > 1 and grown & (grown - 1) == 0  # 64 KiB times a power of two


def test_a_read_only_store_refuses_even_raw_writes(tmp_path: Path) -> None:
    LmdbStore.open(tmp_path / "db", sync=False).close()
    reader = LmdbStore.open(tmp_path / "db", readonly=True)
    with pytest.raises(lmdb.Error):  # LMDB's own refusal: the environment is read-only
        reader.write_raw(Table.COUNTERS, b"n", encode(1, b"n"))
    with reader.read() as txn:
        assert txn.count(CounterName("n")) == 0
    reader.close()


def test_an_empty_payload_round_trips() -> None:
    assert decode(bytes, encode(b"", b"k"), db="feed", key=b"k") == b""


def test_a_checksum_mismatch_says_what_to_do() -> None:
    stored = bytearray(encode(7, b"k"))
    stored[0] ^= 1
    with pytest.raises(StoreDamaged) as damaged:
        decode(int, bytes(stored), db="counters", key=b"k")
    assert damaged.value.message == (
        "checksum mismatch in database 'counters' at key b'k': the record is damaged; restore "
        "the store from a copy (treemail verify lists every damaged record)")


def test_an_abort_that_fails_does_not_hide_the_work_s_error(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    env = store._env

    class _Aborting:  # its write transactions fail to abort, as one LMDB already invalidated does
        def __getattr__(self, name: str) -> Any:
            return getattr(env, name)

        def begin(self, **options: Any) -> Any:
            return _failing(env.begin(**options), "abort", lmdb.Error("invalidated"))

    store._env = cast(lmdb.Environment, _Aborting())

    def work(tx: WriteTxn) -> None:
        raise _Undone("the work's own error")

    with pytest.raises(_Undone, match="the work's own error"):
        store.transact(work)
    store._env = env
    store.close()


@pytest.mark.parametrize(("failure", "error"), [
    (lmdb.DiskError("no space"), StoreFull), (lmdb.Error("bad page"), StorageError)],
    ids=["full disk", "other"])
def test_a_commit_failing_before_its_commit_point_says_nothing_was_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: lmdb.Error,
        error: type[StorageError]) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)

    def refuse(txn: Any) -> None:
        txn.abort()  # the commit point is never reached
        raise failure

    monkeypatch.setattr(lmdb_store, "_commit_durably", refuse)
    with pytest.raises(error) as failed:
        store.transact(lambda tx: tx.put_approval(_approval("a1")))
    monkeypatch.undo()
    path = str(tmp_path / "db")
    assert type(failed.value) is error
    if error is StoreFull:
        assert failed.value.message == (
            "the disk holding the store is full (no space): nothing of this operation was "
            "stored; free space, then retry")
    else:
        assert failed.value.message == (
            f"the store at {path!r} failed to commit (bad page) before the commit point: "
            "nothing of this operation was stored; retry it")
        assert failed.value.details == {"path": path}
    with store.read() as txn:
        assert list(txn.approvals()) == []
    store.close()


def test_a_commit_failing_after_its_commit_point_is_an_unknown_outcome_naming_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    real = lmdb_store._commit_durably

    def commit_then_fail(txn: Any) -> None:
        real(txn)
        raise lmdb.Error("sync failed")

    monkeypatch.setattr(lmdb_store, "_commit_durably", commit_then_fail)
    with pytest.raises(OutcomeUnknown) as failed:
        store.transact(lambda tx: tx.put_approval(_approval("a1")))
    monkeypatch.undo()
    path = str(tmp_path / "db")
    assert failed.value.message == (
        f"the store at {path!r} failed after the commit point (sync failed): the operation "
        "may or may not be stored. Retry the same tool call with the same tool-call id: a "
        "stored send is answered with its original result.")
    assert failed.value.details == {"path": path}
    store.close()


def test_an_empty_feed_ends_at_0_whatever_other_rows_the_store_holds(store: Store) -> None:
    def no_events(tx: WriteTxn) -> int:
        tx.put_approval(_approval("a1"))
        tx.put_session(session("root", "root", None, 1))
        return tx.feed_end()

    assert store.transact(no_events) == 0
    with store.read() as txn:
        assert txn.feed_end() == 0
    assert store.transact(lambda tx: tx.append("root", "Note", {})).seq == 1
    with store.read() as txn:
        assert [number for number, _ in txn.feed()] == [1]


class _Env:
    """An LMDB environment whose ``method`` raises the next of ``errors`` on each call, then
    behaves (as LMDB does when another process grew the map: the first begin says so)."""

    def __init__(self, env: lmdb.Environment, method: str, *errors: lmdb.Error) -> None:
        self._env, self._method, self._errors = env, method, list(errors)

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._env, name)
        if name != self._method:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._errors:
                raise self._errors.pop(0)
            return real(*args, **kwargs)

        return call


@pytest.mark.parametrize(("method", "errors", "said"), [
    ("begin", (lmdb.MapResizedError("grown"), lmdb.Error("injected")),
     "lmdb failed to begin a read transaction: injected"),
    ("begin", (lmdb.ReadersFullError("injected"),),
     "lmdb failed to begin a read transaction: injected"),
    ("set_mapsize", (lmdb.Error("injected"),), "lmdb failed to grow the map: injected"),
    ("begin", (lmdb.Error("injected"),), "lmdb failed to begin a write transaction: injected"),
], ids=["read after the map grew", "first read refused", "growing the map", "first write"])
def test_an_lmdb_failure_of_the_environment_is_a_typed_error_naming_the_step(
        tmp_path: Path, method: str, errors: tuple[lmdb.Error, ...], said: str) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False, map_size=1 << 16,
                           max_map_size=1 << 26)
    env = store._env
    store._env = cast(lmdb.Environment, _Env(env, method, *errors))
    with pytest.raises(StorageError) as failed:
        if "read" in said:
            with store.read():
                pass
        else:
            store.transact(_fill)  # more than the map holds: it must grow
    store._env = env
    store.close()
    assert type(failed.value) is StorageError
    assert failed.value.message == said


LONG = 30.0  # seconds: a liveness bound for a thread that must finish, never a race


def test_a_nested_read_does_not_wait_for_a_grower_waiting_on_the_outer_one() -> None:
    gate = _ReadGate()
    grown, nested = threading.Event(), threading.Event()
    outer_open, release = threading.Event(), threading.Event()

    def reader() -> None:
        with gate.reading():
            outer_open.set()
            while not gate._growing:  # the grower now waits for this read to end
                time.sleep(0.001)
            with gate.reading():  # must not wait for the grower: it waits for us
                nested.set()
            release.wait(LONG)

    def grower() -> None:
        outer_open.wait(LONG)
        with gate.exclusive():
            grown.set()

    threads = [threading.Thread(target=reader, daemon=True),
               threading.Thread(target=grower, daemon=True)]
    for thread in threads:
        thread.start()
    assert nested.wait(LONG), "the nested read waited for the grower: a deadlock"
    assert not grown.is_set()  # the grower still waits for the outer read
    release.set()
    for thread in threads:
        thread.join(LONG)
    assert grown.is_set()


class _Failing:
    """An LMDB transaction or environment whose ``method`` raises ``error``."""

    def __init__(self, inner: Any, method: str, error: lmdb.Error) -> None:
        self._inner, self._method, self._error = inner, method, error

    def __getattr__(self, name: str) -> Any:
        if name != self._method:
            return getattr(self._inner, name)

        def fail(*args: object, **kwargs: object) -> None:
            raise self._error

        return fail


def _failing(inner: Any, method: str, error: lmdb.Error) -> Any:
    return _Failing(inner, method, error)


def _read(tables: LmdbTables) -> None:
    tables.stack[-1] = _failing(tables.stack[-1], "get", lmdb.Error("injected"))
    tables.get(Table.SESSIONS, b"s")


def _read_rows(tables: LmdbTables) -> None:
    tables.stack[-1] = _failing(tables.stack[-1], "get", lmdb.Error("injected"))
    tables.get_rows([(Table.SESSIONS, b"s")])


# A flush of puts only reaches LMDB through a cursor's ``putmulti``: failing the cursor fails
# the write. A flush of rows of several tables names each of them.
def _write(error: lmdb.Error, *changed: Table) -> Callable[[LmdbTables], None]:
    def write(tables: LmdbTables) -> None:
        for table in changed or (Table.RUNS,):
            tables.put(table, b"r", "a row")
        tables.stack[-1] = _failing(tables.stack[-1], "cursor", error)
        tables.flush()
    return write


def _below_a_savepoint(tables: LmdbTables) -> None:
    tables.put(Table.RUNS, b"r", "a run")
    tables.stack[-1] = _failing(tables.stack[-1], "cursor", lmdb.Error("injected"))
    with tables.savepoint():
        tables.scan(Table.RUNS, b"")  # the run must go below the savepoint first


def _scan(tables: LmdbTables) -> None:
    tables.stack[-1] = _failing(tables.stack[-1], "cursor", lmdb.Error("injected"))
    tables.scan(Table.RUNS, b"")


def _count(tables: LmdbTables) -> None:
    tables.stack[-1] = _failing(tables.stack[-1], "cursor", lmdb.Error("injected"))
    tables.size(Table.FEED)


def _open_a_savepoint(tables: LmdbTables) -> None:
    tables.env = _failing(tables.env, "begin", lmdb.Error("injected"))
    with tables.savepoint():
        tables.put(Table.RUNS, b"r", "a run")
        tables.scan(Table.RUNS, b"")


@pytest.mark.parametrize(("step", "error", "said"), [
    (_read, StorageError, "lmdb failed to read sessions: injected"),
    (_read_rows, StorageError, "lmdb failed to read sessions: injected"),
    (_scan, StorageError, "lmdb failed to scan runs: injected"),
    (_count, StorageError, "lmdb failed to count feed: injected"),
    (_write(lmdb.Error("injected")), StorageError, "lmdb failed to write runs: injected"),
    (_write(lmdb.Error("injected"), Table.RUNS, Table.APPROVALS), StorageError,
     "lmdb failed to write runs, approvals: injected"),
    (_write(lmdb.DiskError("injected")), StoreFull,
     "the disk holding the store is full (injected): nothing of this operation was stored; "
     "free space, then retry"),
    (_below_a_savepoint, StorageError, "lmdb failed to write below a savepoint: injected"),
    (_open_a_savepoint, StorageError, "lmdb failed to open a savepoint: injected"),
], ids=["read", "read rows", "scan", "count", "write", "write two tables", "full disk",
        "below a savepoint", "open a savepoint"])
def test_an_lmdb_failure_is_a_typed_error_naming_the_step_and_the_cause(
        tmp_path: Path, step: Callable[[LmdbTables], None], error: type[StorageError],
        said: str) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    with pytest.raises(error) as failed:
        store.transact(lambda tx: step(cast(LmdbTxn, tx).tables))
    assert type(failed.value) is error
    assert failed.value.message == said
    with store.read() as txn:  # nothing of it was stored
        assert txn.run("r") is None
    store.close()


@pytest.mark.parametrize("raw", [b'"a string"', b"{not json"], ids=["wrong type", "not json"])
def test_a_record_that_fails_to_decode_is_named_by_its_table_and_key(raw: bytes) -> None:
    stored = encode(raw, b"k")  # bytes are stored as they are: a sound checksum over them
    with pytest.raises(StoreDamaged) as damaged:
        decode(int, stored, db="counters", key=b"k")
    assert damaged.value.details == {"db": "counters", "key": b"k"}
    assert damaged.value.message.startswith(
        "cannot decode a int in database 'counters' at key b'k': ")


def test_a_damaged_row_read_with_others_is_named_by_its_table_and_key(tmp_path: Path) -> None:
    """``get_rows`` (a send's first reads) names a damaged row as ``get`` does."""
    store = LmdbStore.open(tmp_path / "db", sync=False)
    store.write_raw(Table.APPROVALS, b"k", b"not a record")
    with pytest.raises(StoreDamaged) as damaged:
        store.transact(lambda tx: cast(LmdbTxn, tx).tables.get_rows(
            [(Table.SESSIONS, b"s"), (Table.APPROVALS, b"k")]))
    assert damaged.value.details == {"db": Table.APPROVALS, "key": b"k"}
    store.close()


@pytest.fixture
def held(tmp_path: Path) -> Iterator[LmdbStore]:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    yield store
    store.close()


def test_the_owner_s_description_is_what_a_refused_writer_is_told(
        held: LmdbStore, tmp_path: Path) -> None:
    held.own({"role": "daemon", "socket": "/run/t.sock"})
    with pytest.raises(StoreLocked) as refused:
        LmdbStore.open(tmp_path / "db")
    assert refused.value.details["holder"] == {"role": "daemon", "socket": "/run/t.sock"}
    assert "is in use by daemon (pid " in refused.value.message
    assert refused.value.message.endswith(", socket /run/t.sock); stop it first, or open the "
                                          "store read-only to look at it")


def test_a_second_open_in_one_process_is_refused_naming_the_store_and_lmdb_s_reason(
        held: LmdbStore, tmp_path: Path) -> None:
    """LMDB opens an environment once per process: a reader opened beside this process's
    writer is refused, typed, with the store's path and what LMDB said."""
    path = str(tmp_path / "db")
    with pytest.raises(StorageError) as refused:
        LmdbStore.open(path, readonly=True)
    assert type(refused.value) is StorageError
    assert refused.value.message.startswith(f"cannot open the store at {path!r}: ")
    assert "already open in this process" in refused.value.message  # LMDB's own words
    assert refused.value.details == {"path": path}


@pytest.mark.parametrize(("call", "to"), [
    (lambda reader: reader.own({"role": "daemon"}), "own it"),
    (lambda reader: reader.transact(lambda tx: tx.add(CounterName("n"), 1)), "write"),
], ids=["own", "transact"])
def test_a_reader_can_neither_own_nor_write_the_store(
        tmp_path: Path, call: Callable[[LmdbStore], object], to: str) -> None:
    LmdbStore.open(tmp_path / "db", sync=False).close()
    reader = LmdbStore.open(tmp_path / "db", readonly=True)
    with pytest.raises(StorageError) as refused:
        call(reader)
    reader.close()
    path = str(tmp_path / "db")
    assert type(refused.value) is StorageError
    assert refused.value.message == (
        f"the store at {path!r} was opened read-only; open it without readonly=True to {to}")
    assert refused.value.details == {"path": path}


def test_a_closed_store_names_itself_and_says_to_open_it_again(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    store.close()
    with pytest.raises(StoreClosed) as closed, store.read():
        pass
    path = str(tmp_path / "db")
    assert closed.value.message == f"the store at {path!r} is closed; open it again"
    assert closed.value.details == {"path": path}


@pytest.mark.parametrize(("call", "said"), [
    (lambda store: store.transact(lambda tx: None),
     "transact called from inside transact; use txn.savepoint()"),
    (lambda store: store.close(),
     "close called from inside transact; close it after transact returns"),
], ids=["transact", "close"])
def test_a_call_from_inside_transact_is_refused_saying_what_to_do_instead(
        tmp_path: Path, call: Callable[[LmdbStore], object], said: str) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    with pytest.raises(StorageError) as refused:
        store.transact(lambda tx: call(store))
    assert type(refused.value) is StorageError
    assert refused.value.message == said
    store.transact(lambda tx: tx.add(CounterName("n"), 1))  # the store still works
    store.close()


class _Interrupted(BaseException):
    """Not an ``Exception``, as a ``KeyboardInterrupt`` is not."""


def test_an_interrupt_of_the_work_reaches_the_caller_and_stores_nothing(
        tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)

    def work(tx: WriteTxn) -> None:
        tx.put_approval(_approval("a1"))
        raise _Interrupted

    with pytest.raises(_Interrupted):
        store.transact(work)
    store.transact(lambda tx: tx.put_approval(_approval("a2")))  # LMDB's write lock is free
    with store.read() as txn:
        assert [approval.approval_id for approval in txn.approvals()] == ["a2"]
    store.close()


def test_work_that_swallows_a_full_map_runs_again_on_a_grown_map(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False, map_size=1 << 16,
                           max_map_size=1 << 26)
    runs: list[bool] = []

    def work(tx: WriteTxn) -> list[str]:
        _fill(tx)
        try:
            found = _ids(tx)  # the scan writes the rows to LMDB: the first map is too small
        except lmdb.MapFullError:
            found = []  # swallowed: what the work did is incomplete, and must not commit
        runs.append(bool(found))
        return found

    every = sorted(f"a{n}" for n in range(40))
    assert store.transact(work) == every
    assert runs[0] is False and runs[-1] is True
    with store.read() as txn:
        assert [approval.approval_id for approval in txn.approvals()] == every
    store.close()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[Table]:
    """Each table LMDB is asked to count (a seek to the feed's end), in order."""
    asked: list[Table] = []
    real = LmdbTables._count

    def count(tables: LmdbTables, table: Table) -> int:
        asked.append(table)
        return real(tables, table)

    monkeypatch.setattr(LmdbTables, "_count", count)
    return asked


def _append(tx: WriteTxn) -> int:
    tx.append("root", "Note", {})
    return tx.feed_end()


def test_a_write_after_a_commit_takes_the_feed_s_end_from_it_without_seeking_it(
        tmp_path: Path, counted: list[Table]) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    assert [store.transact(_append) for _ in range(3)] == [1, 2, 3]
    assert counted == [Table.FEED]  # once, by the first transaction
    store.close()


def test_an_undone_savepoint_gives_the_feed_s_numbers_back_without_a_seek(
        tmp_path: Path, counted: list[Table]) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    store.transact(_append)

    def work(tx: WriteTxn) -> int:
        with suppress(_Undone), tx.savepoint() as inner:
            _append(inner)
            raise _Undone
        return _append(tx)  # a seek here would write the feed's rows out first

    assert store.transact(work) == 2
    assert counted == [Table.FEED]  # by the first transaction only
    with store.read() as txn:
        assert [number for number, _ in txn.feed()] == [1, 2]
    store.close()


def test_only_the_feed_is_sized(tmp_path: Path) -> None:
    """The port sizes only the feed (``feed_end``): LMDB's tables count nothing else."""
    store = LmdbStore.open(tmp_path / "db", sync=False)
    with pytest.raises(ValueError, match="LmdbTables sizes only the feed, not sessions"):
        store.transact(lambda tx: cast(LmdbTxn, tx).tables.size(Table.SESSIONS))
    store.close()
