"""An LMDB transaction reads and decodes each row once, and writes each changed row once:
later reads of a row it already read or wrote are answered from the transaction itself,
writes reach LMDB when the transaction (or savepoint) ends, and a savepoint undone forgets
them.

The LMDB reads and writes a send, a claim and a consume cost are pinned here as exact
numbers, so a change that adds store work to those paths fails here, not only in the bench.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import attrs
import pytest

from tests.unit.conftest import World
from treemail.adapters.store import codec, lmdb_txn
from treemail.adapters.store.group_commit import GroupStore
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core import keys
from treemail.core.engine import Engine
from treemail.core.keys import CounterName, Table
from treemail.core.records import Approval, Session
from treemail.core.runs import Request
from treemail.core.store import WriteTxn
from treemail.testing.store_sample import session


@attrs.define
class Traffic:
    """Every LMDB point read, write (put or delete) and decode, by table."""

    reads: Counter[str] = attrs.Factory(Counter)
    writes: Counter[str] = attrs.Factory(Counter)
    decoded: Counter[tuple[str, bytes]] = attrs.Factory(Counter)

    def clear(self) -> None:
        for each in (self.reads, self.writes, self.decoded):
            each.clear()

    def during(self, action: Callable[[], object]) -> Traffic:
        self.clear()
        action()
        return Traffic(Counter(self.reads), Counter(self.writes), Counter(self.decoded))


@pytest.fixture
def traffic(monkeypatch: pytest.MonkeyPatch) -> Iterator[Traffic]:
    seen = Traffic()
    tables = lmdb_txn.LmdbTables
    get, get_rows, write, decode = tables.get, tables.get_rows, tables._to_lmdb, codec.decode

    def counted_get(self: Any, table: Table, key: bytes) -> Any:
        if (table, key) not in self.seen:  # a row not cached yet: LMDB is read
            seen.reads[table] += 1
        return get(self, table, key)

    def counted_get_rows(self: Any, rows: list[tuple[Table, bytes]]) -> list[Any]:
        for table, key in rows:
            if (table, key) not in self.seen:
                seen.reads[table] += 1
        return get_rows(self, rows)

    def counted_write(self: Any, rows: list[tuple[bytes, bytes | None]]) -> None:
        for stored, _ in rows:
            seen.writes[keys.table_of(stored)] += 1
        write(self, rows)

    def counted_decode(kind: Any, raw: bytes, *, db: str, key: bytes) -> Any:
        seen.decoded[(db, bytes(key))] += 1
        return decode(kind, raw, db=db, key=key)

    monkeypatch.setattr(tables, "get", counted_get)
    monkeypatch.setattr(tables, "get_rows", counted_get_rows)
    monkeypatch.setattr(tables, "_to_lmdb", counted_write)
    monkeypatch.setattr(lmdb_txn, "decode", counted_decode)
    yield seen


def _tree(store: LmdbStore) -> tuple[World, Session, Session, Session]:
    world = World(store)
    lead = world.root("lead", {"*": "allow"})
    a, b = world.child(lead, "a", {"*": "allow"}), world.child(lead, "b", {"*": "allow"})
    world.activate(b)
    world.send(world.ctx(lead), b, "pending")  # b's tally holds counters already
    return world, lead, a, b


def test_a_send_reads_and_writes_each_row_once(tmp_path: Path, traffic: Traffic) -> None:
    store = LmdbStore.open(tmp_path, sync=False)
    world, _, a, b = _tree(store)
    ctx = world.ctx(a)
    sent = traffic.during(lambda: world.send(ctx, b, "hello"))
    assert max(sent.decoded.values()) == 1, sent.decoded.most_common(3)
    # Read: the sender and its run, the recipient by its handle, the idempotency entry (not
    # there yet) and the recipient's tally: its message seq, guard counters and last event
    # seq. Not the new message's id: a new id names no stored message.
    assert sent.reads == {Table.SESSIONS: 2, Table.RUNS: 1, Table.HANDLES: 1, Table.REPLAY: 1,
                          Table.TALLY: 1}, sent.reads
    # Written: the message, its pending entry, its accepted event and feed entry, the
    # idempotency entry, and the recipient's tally once for its four changes.
    assert sent.writes == {Table.MESSAGES: 1, Table.PENDING: 1, Table.EVENTS: 1, Table.FEED: 1,
                           Table.REPLAY: 1, Table.TALLY: 1}, sent.writes
    store.close()


def test_a_claim_and_a_consume_write_the_tally_once(tmp_path: Path, traffic: Traffic) -> None:
    store = LmdbStore.open(tmp_path, sync=False)
    world, _, a, b = _tree(store)
    for n in range(4):
        world.send(world.ctx(a), b, f"note {n}")
    run = world.activate(b)
    engine = world.engine
    requests: list[Request] = []
    claim = traffic.during(lambda: requests.append(engine.begin_request(b.session_id,
                                                                         run.run_id)))
    request = requests[0]
    assert len(request.deliveries) == 6  # the task, the mail from lead and a's four notes
    # Six messages admitted and claimed: each message once and its two events; b's run and
    # tally once however many messages step; the senders' sessions (they name the mail).
    # Their pending entries are not rewritten: they do not change while mail is pending.
    assert claim.writes == {Table.MESSAGES: 6, Table.EVENTS: 12, Table.FEED: 12,
                            Table.RUNS: 1, Table.TALLY: 1}, claim.writes
    assert claim.reads == {Table.SESSIONS: 3, Table.RUNS: 1, Table.MESSAGES: 6,
                           Table.TALLY: 1}, claim.reads
    done = traffic.during(lambda: engine.commit_request(b.session_id, run.run_id,
                                                        request.request_id))
    # Consumed: each message and its pending entry dropped, its event, and the ModelOutput
    # event; the run; and b's tally once (inbox and pair counters down, last event seq up).
    assert done.writes == {Table.MESSAGES: 6, Table.PENDING: 6, Table.EVENTS: 7, Table.FEED: 7,
                           Table.RUNS: 1, Table.TALLY: 1}, done.writes
    assert done.reads == {Table.SESSIONS: 1, Table.RUNS: 1, Table.MESSAGES: 6,
                          Table.TALLY: 1}, done.reads
    assert max(done.decoded.values()) == 1, done.decoded.most_common(3)
    store.close()


def test_an_undone_savepoint_is_not_read_back(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path, sync=False)
    store.transact(lambda tx: tx.add(CounterName("n"), 1))

    def work(tx: WriteTxn) -> int:
        assert tx.count(CounterName("n")) == 1  # read: now kept by the transaction
        with pytest.raises(RuntimeError), tx.savepoint() as inner:
            inner.add(CounterName("n"), 5)
            assert inner.count(CounterName("n")) == 6
            raise RuntimeError("undo")
        return tx.count(CounterName("n"))

    assert store.transact(work) == 1
    with store.read() as tx:
        assert tx.count(CounterName("n")) == 1
    store.close()


def test_a_row_written_twice_reaches_lmdb_once(tmp_path: Path, traffic: Traffic) -> None:
    store = LmdbStore.open(tmp_path, sync=False)

    def work(tx: WriteTxn) -> int:
        tx.add(CounterName("n"), 2)
        return tx.add(CounterName("n"), 3)

    assert store.transact(work) == 5
    assert traffic.decoded[(Table.COUNTERS, b"n")] == 0  # absent, then the row it wrote
    assert traffic.writes == {Table.COUNTERS: 1}
    with store.read() as tx:
        assert tx.count(CounterName("n")) == 5
    store.close()


def test_a_scan_sees_the_rows_written_before_it(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path, sync=False)

    def work(tx: WriteTxn) -> list[int]:
        tx.append("s", "first", {})
        tx.append("s", "second", {})
        return [event.seq for event in tx.events("s")] + [tx.feed_end()]

    assert store.transact(work) == [1, 2, 2]
    store.close()


def test_sends_in_a_group_commit_batch_write_each_row_once_in_one_lmdb_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traffic: Traffic) -> None:
    # A savepoint writes to LMDB itself only when it must (a range read of a table it
    # changed); a send's savepoint never must, so a batch of sends is one LMDB transaction,
    # and the rows they share (the recipient's tally) are written once for the batch.
    store = LmdbStore.open(tmp_path, sync=False)
    world, _, a, b = _tree(store)
    contexts = [world.ctx(a) for _ in range(4)]  # the pair cap is 4
    nested: list[int] = []
    nest = lmdb_txn.LmdbTables._nest

    def counted_nest(self: lmdb_txn.LmdbTables) -> None:
        nested.append(1)
        nest(self)

    monkeypatch.setattr(lmdb_txn.LmdbTables, "_nest", counted_nest)
    group = GroupStore(store)
    engine = Engine(group, world.engine.ids, world.engine.config)

    def sends() -> None:
        for ctx in contexts:
            engine.send_message(ctx, {"to": b.session_id, "body": "batched"})

    batched = traffic.during(lambda: group.batch(sends))
    assert nested == []
    assert batched.writes == {Table.MESSAGES: 4, Table.PENDING: 4, Table.EVENTS: 4,
                              Table.FEED: 4, Table.REPLAY: 4, Table.TALLY: 1}, batched.writes
    with store.read() as tx:
        assert len(list(tx.pending(b.session_id))) == 1 + 1 + 4  # the task, lead's, these
    store.close()


def test_a_tally_written_beside_a_row_of_its_key_is_read_back_without_a_decode(
        tmp_path: Path, traffic: Traffic) -> None:
    """The tally's bytes this process wrote are kept for the next read of it; another
    table's row under the same key (the session's own) does not take their place."""
    store = LmdbStore.open(tmp_path, sync=False)

    def work(tx: WriteTxn) -> None:
        tx.append("s", "Note", {})  # the tally of s, written first
        tx.put_session(session("s", "s", None, 1))  # then the session, under the same key

    store.transact(work)
    traffic.clear()
    assert store.transact(lambda tx: tx.append("s", "Note", {})).seq == 2
    assert traffic.reads[Table.TALLY] == 1
    assert traffic.decoded[(Table.TALLY, keys.identity("s"))] == 0
    store.close()


def test_the_written_tallies_kept_are_bounded_and_rewriting_a_kept_one_keeps_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traffic: Traffic) -> None:
    """The process keeps the written bytes of up to ``_WRITTEN_LIMIT`` sessions' tallies,
    then starts afresh: a new session's tally past the bound empties the memory, a tally it
    already keeps (every send rewrites its recipient's) does not."""
    monkeypatch.setattr(lmdb_txn, "_WRITTEN_TALLIES", {})  # none of the other tests' sessions
    monkeypatch.setattr(lmdb_txn, "_WRITTEN_LIMIT", 2)
    store = LmdbStore.open(tmp_path, sync=False)

    def note(*names: str) -> Callable[[WriteTxn], None]:
        def work(tx: WriteTxn) -> None:
            for name in names:
                tx.append(name, "Note", {})
        return work

    def kept() -> list[bytes]:
        return sorted(lmdb_txn._WRITTEN_TALLIES)

    s1, s2, s3 = (keys.identity(name) for name in ("s1", "s2", "s3"))
    store.transact(note("s1", "s2"))
    assert kept() == [s1, s2]
    traffic.clear()
    store.transact(note("s1", "s2"))  # both tallies read back as written: no decode
    assert traffic.reads[Table.TALLY] == 2
    assert traffic.decoded[(Table.TALLY, s1)] == traffic.decoded[(Table.TALLY, s2)] == 0
    assert kept() == [s1, s2]  # rewritten at the bound: each already kept
    store.transact(note("s3"))
    assert kept() == [s3]  # a third session's: the memory starts afresh
    store.close()


def test_rows_read_together_are_decoded_once_if_steady_and_afresh_if_not(
        tmp_path: Path, traffic: Traffic) -> None:
    """``get_rows`` keeps a session's decoded record across transactions by its bytes, as
    ``get`` does; a row that changes (an approval, here) is decoded and checked afresh."""
    store = LmdbStore.open(tmp_path, sync=False)
    sid, aid = keys.identity("s"), keys.identity("a1")

    def work(tx: WriteTxn) -> None:
        tx.put_session(session("s", "s", None, 1))
        tx.put_approval(Approval("a1", "s", "r", "a1", "send_message", {}, "ask"))

    store.transact(work)
    rows = [(Table.SESSIONS, sid), (Table.APPROVALS, aid)]

    def read(tx: WriteTxn) -> list[Any]:
        return cast(lmdb_txn.LmdbTxn, tx).tables.get_rows(rows)

    store.transact(read)
    traffic.clear()
    found = store.transact(read)
    assert [found[0].session_id, found[1].approval_id] == ["s", "a1"]
    assert traffic.decoded[(Table.SESSIONS, sid)] == 0
    assert traffic.decoded[(Table.APPROVALS, aid)] == 1
    store.close()
