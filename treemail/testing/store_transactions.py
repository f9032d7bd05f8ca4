"""``TransactionContract``: a Store's transactions and savepoints, part of ``StoreContract``.

A transaction keeps all its work or none of it; a failed savepoint undoes its own writes only,
at any depth, and reads its own writes meanwhile. ``MemoryStore`` gives the expected state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from treemail.core.keys import CounterName
from treemail.core.memory_store import MemoryStore
from treemail.core.records import (
    Event,
)
from treemail.core.store import Store, WriteTxn
from treemail.testing.store_sample import (
    CHILD,
    MESSAGE_IDS,
    ROOT,
    Boom,
    StoreHarness,
    failing,
    message,
    mutate_everything,
    populate,
    snapshot,
)

__all__ = ["TransactionContract"]


class TransactionContract(StoreHarness):
    def test_transact_returns_the_work_result(self, store: Store) -> None:
        def work(tx: WriteTxn) -> tuple[int, Event]:
            return tx.add(CounterName("n"), 2), tx.append(ROOT, "k", {})

        assert store.transact(work) == (2, Event(ROOT, 1, "k", {}))

    def test_raising_work_leaves_the_store_exactly_as_before(self, store: Store) -> None:
        store.transact(populate)
        before = self.read(store)
        seen_inside: list[dict[str, Any]] = []

        def work(tx: WriteTxn) -> None:
            mutate_everything(tx)
            seen_inside.append(snapshot(tx))

        with pytest.raises(Boom):
            store.transact(failing(work))
        # The work really changed every part of the snapshot before it raised...
        assert all(seen_inside[0][part] != before[part] for part in before)
        # ...and none of it was kept.
        assert self.read(store) == before

    def test_committed_work_is_all_kept(self, store: Store, directory: Path) -> None:
        store.transact(populate)
        expected: list[dict[str, Any]] = []
        def work(tx: WriteTxn) -> None:
            mutate_everything(tx)
            expected.append(snapshot(tx))

        store.transact(work)
        store = self.reopen(store, directory)
        assert self.read(store) == expected[0]

    def test_failed_savepoint_undoes_only_its_own_writes(self, store: Store) -> None:
        store.transact(populate)

        def work(tx: WriteTxn) -> Event:
            tx.add(CounterName("kept"), 1)
            with pytest.raises(Boom), tx.savepoint() as sp:
                mutate_everything(sp)
                sp.append(CHILD, "undone", {})
                raise Boom
            with tx.savepoint() as sp:
                sp.put_message(message(MESSAGE_IDS[4], CHILD, 9))
            return tx.append(CHILD, "after", {})

        after = store.transact(work)
        expected = self.read_after(store, populate)
        expected["pending"][CHILD].append(message(MESSAGE_IDS[4], CHILD, 9))
        expected["messages"][MESSAGE_IDS[4]] = message(MESSAGE_IDS[4], CHILD, 9)
        expected["events"][CHILD].append(after)
        assert after.seq == 2  # the undone append gave its number back
        with store.read() as tx:
            assert tx.count(CounterName("kept")) == 1
        assert self.read(store) == expected

    def read_after(self, store: Store, work: Any) -> dict[str, Any]:
        """The snapshot a fresh store would show after ``work``."""
        fresh = MemoryStore()
        fresh.transact(work)
        return self.read(fresh)

    def test_nested_savepoint_failure_keeps_the_enclosing_savepoint(self, store: Store) -> None:
        def work(tx: WriteTxn) -> None:
            with tx.savepoint() as outer:
                outer.add(CounterName("outer"), 1)
                with pytest.raises(Boom), outer.savepoint() as inner:
                    inner.add(CounterName("inner"), 1)
                    inner.add(CounterName("outer"), 10)
                    raise Boom
                outer.add(CounterName("outer"), 1)

        store.transact(work)
        with store.read() as tx:
            assert (tx.count(CounterName("outer")), tx.count(CounterName("inner"))) == (2, 0)

    def test_a_savepoint_reads_its_own_writes_in_ranges_and_undoes_them(
            self, store: Store) -> None:
        # Ranges and counts see a savepoint's unfinished writes; undoing it (at any depth)
        # undoes exactly them, whether or not they were already written out for the range.
        store.transact(populate)
        with store.read() as tx:
            log, feed = [e.kind for e in tx.events(CHILD)], tx.feed_end()

        def work(tx: WriteTxn) -> list[int]:
            with pytest.raises(Boom), tx.savepoint() as sp:
                sp.put_message(message(MESSAGE_IDS[4], CHILD, 9))
                assert [m.seq for m in sp.pending(CHILD)] == [1, 2, 9]
                sp.append(CHILD, "undone", {})
                assert [e.kind for e in sp.events(CHILD)] == [*log, "undone"]
                assert sp.feed_end() == feed + 1
                raise Boom
            with tx.savepoint() as outer:
                outer.put_message(message(MESSAGE_IDS[4], CHILD, 9))
                with pytest.raises(Boom), outer.savepoint() as inner:
                    inner.put_message(message(MESSAGE_IDS[3], CHILD, 8))
                    assert [m.seq for m in inner.pending(CHILD)] == [1, 2, 8, 9]
                    raise Boom
                assert [m.seq for m in outer.pending(CHILD)] == [1, 2, 9]
                with outer.savepoint() as kept:
                    kept.append(CHILD, "kept", {})
            return [m.seq for m in tx.pending(CHILD)]

        assert store.transact(work) == [1, 2, 9]
        with store.read() as tx:
            assert [m.seq for m in tx.pending(CHILD)] == [1, 2, 9]
            assert tx.message(MESSAGE_IDS[3]) is None
            assert [e.kind for e in tx.events(CHILD)] == [*log, "kept"]
            assert tx.feed_end() == feed + 1

    def test_a_row_changed_at_every_depth_is_undone_to_each_depth(self, store: Store) -> None:
        # A counter changed by the transaction, a savepoint and one inside it, with range
        # reads forcing writes out mid-savepoint: each undo goes back exactly one level.
        def work(tx: WriteTxn) -> tuple[int, int, int]:
            tx.add(CounterName("n"), 1)
            with tx.savepoint() as outer:
                outer.add(CounterName("n"), 10)
                with pytest.raises(Boom), outer.savepoint() as inner:
                    inner.add(CounterName("n"), 100)
                    inner.put_message(message(MESSAGE_IDS[4], CHILD, 9))
                    assert [m.seq for m in inner.pending(CHILD)] == [9]
                    assert inner.count(CounterName("n")) == 111
                    raise Boom
                after_inner = outer.count(CounterName("n"))
                outer.add(CounterName("n"), 1000)
            after_outer = tx.count(CounterName("n"))
            tx.add(CounterName("m"), 7)  # before the last savepoint, untouched by it
            with pytest.raises(Boom), tx.savepoint() as last:
                last.add(CounterName("n"), 5)
                assert list(last.pending(CHILD)) == []
                raise Boom
            return after_inner, after_outer, tx.count(CounterName("n")) + tx.count(CounterName("m"))

        assert store.transact(work) == (11, 1011, 1018)
        with store.read() as tx:
            assert (tx.count(CounterName("n")), tx.count(CounterName("m"))) == (1011, 7)
            assert tx.message(MESSAGE_IDS[4]) is None and list(tx.pending(CHILD)) == []

    def test_outer_txn_stays_usable_inside_a_savepoint(self, store: Store) -> None:
        # MemoryStore's savepoint yields the transaction itself; code written against it may
        # keep using the outer name, so every store must accept that.
        def work(tx: WriteTxn) -> None:
            tx.add(CounterName("n"), 1)
            with tx.savepoint() as sp:
                tx.add(CounterName("n"), 1)
                assert sp.count(CounterName("n")) == 2
            with pytest.raises(Boom), tx.savepoint():
                tx.add(CounterName("n"), 100)
                raise Boom

        store.transact(work)
        with store.read() as tx:
            assert tx.count(CounterName("n")) == 2

    def test_savepoint_failure_rolls_back_then_transact_failure_rolls_back_all(
        self, store: Store
    ) -> None:
        def work(tx: WriteTxn) -> None:
            with tx.savepoint() as sp:
                populate(sp)
            raise Boom

        with pytest.raises(Boom):
            store.transact(work)
        assert self.read(store) == self.read(MemoryStore())
