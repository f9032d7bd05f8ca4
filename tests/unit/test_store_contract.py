"""One contract for every Store: each store kind subclasses ``StoreContract``, which ships in
the package (``treemail.testing``) so that a backend outside treemail can pass it too.

``MemoryStore`` is the reference; ``LmdbStore`` (and ``PostgresStore``, see
``test_postgres_store.py``) must behave identically. A subclass supplies ``make_store`` (a
fresh store in a directory), ``reopen`` (the same data after a restart; a no-op for memory)
and ``counter_names`` (which counters are physically kept, so "a counter at 0 is not kept" can
be checked). LMDB-only behaviour (durability, map growth, damaged records) lives in
``TestLmdbStore`` itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tests.unit.test_store_format import as_format_3
from treemail.adapters.store.codec import CHECKSUM_BYTES, encode
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core import keys
from treemail.core.errors import StorageError, StoreClosed, StoreDamaged, StoreFormatUnknown
from treemail.core.keys import CounterName, Table
from treemail.core.memory_store import MemoryStore
from treemail.core.records import Session
from treemail.core.store import Store, WriteTxn
from treemail.testing.store_contract import StoreContract
from treemail.testing.store_sample import (
    CHILD,
    MESSAGE_IDS,
    ROOT,
    Boom,
    failing,
    message,
    mutate_everything,
    populate,
    session,
    snapshot,
)

__all__ = ["CHILD", "populate", "snapshot"]  # reused by test_store_files.py


# -- the stores ----------------------------------------------------------------------------


class TestMemoryStore(StoreContract):
    def make_store(self, directory: Path) -> Store:
        return MemoryStore()

    def reopen(self, store: Store, directory: Path) -> Store:
        return store

    def counter_names(self, store: Store) -> set[str]:
        assert isinstance(store, MemoryStore)
        return {key.decode() for key in store.rows(Table.COUNTERS)}

    def test_fork_is_an_independent_copy(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)
        store.transact(populate)
        before = self.read(store)
        twin = store.fork()
        assert self.read(twin) == before
        twin.transact(mutate_everything)
        assert self.read(store) == before  # the original is untouched by the copy's writes
        store.transact(lambda tx: tx.add(CounterName("fresh"), 1))
        assert self.read(twin)["counts"]["fresh"] == 7
        assert twin.transact(lambda tx: tx.append(ROOT, "k", {})).seq == 3

    def test_txn_held_past_close_raises(self, store: Store) -> None:
        leaked = store.transact(lambda tx: tx)
        store.close()
        with pytest.raises(StoreClosed):
            leaked.add(CounterName("n"), 1)
        with pytest.raises(StoreClosed):
            leaked.session(ROOT)
        assert isinstance(store, MemoryStore)
        with pytest.raises(StoreClosed):
            store.fork()


class TestLmdbStore(StoreContract):
    opened: list[Store]

    def make_store(self, directory: Path, **options: Any) -> LmdbStore:
        store = LmdbStore.open(directory, **options)
        self.opened = [*getattr(self, "opened", []), store]
        return store

    @pytest.fixture(autouse=True)
    def close_all(self) -> Iterator[None]:
        yield
        for store in getattr(self, "opened", []):
            store.close()

    def reopen(self, store: Store, directory: Path) -> Store:
        store.close()
        return self.make_store(directory)

    def overwrite(self, directory: Path, db: bytes, key: bytes, raw: bytes) -> None:
        """Put ``raw`` under ``key`` behind the store's back (``db``: a table, or meta)."""
        if db != b"meta":
            store = LmdbStore.open(directory, sync=False)
            store.write_raw(Table(db.decode()), key, raw)
            store.close()
            return
        env = lmdb.open(str(directory), max_dbs=16)
        with env.begin(write=True) as tx:
            tx.put(key, raw, db=env.open_db(db, txn=tx))
        env.close()

    def test_the_feed_end_handed_between_commits_is_the_counted_one(
        self, directory: Path
    ) -> None:
        """The writer hands the feed's end from commit to commit instead of seeking it: a
        failed transaction, an undone savepoint and a raw write must not leave it wrong."""
        store = self.make_store(directory, sync=False)
        store.transact(populate)  # feed 1 and 2
        with pytest.raises(Boom):
            store.transact(failing(lambda tx: tx.append(ROOT, "lost", {})))

        def work(tx: WriteTxn) -> None:
            with contextlib.suppress(Boom), tx.savepoint() as inner:
                inner.append(ROOT, "undone", {})
                raise Boom
            tx.append(CHILD, "kept", {})  # 3

        store.transact(work)
        entry = keys.event(ROOT, 1)
        store.write_raw(Table.FEED, keys.feed(4), encode(entry, keys.feed(4)))  # 4, raw
        store.transact(lambda tx: tx.append(ROOT, "after", {}))  # 5
        reopened = self.reopen(store, directory)
        with reopened.read() as tx:
            assert [number for number, _ in tx.feed()] == [1, 2, 3, 4, 5]
            assert [event.kind for _, event in tx.feed(after=2)] == [
                "kept", "created", "after"]

    @pytest.mark.parametrize("position", [0, 20, -1])
    def test_flipped_byte_in_a_record_is_a_checksum_error_naming_it(
        self, directory: Path, position: int
    ) -> None:
        store = self.make_store(directory)
        store.transact(populate)
        assert isinstance(store, LmdbStore)
        with store.raw_rows() as rows:
            raw = bytearray(dict(rows(Table.MESSAGES))[MESSAGE_IDS[0].encode()])
        raw[position] ^= 0x01
        store.write_raw(Table.MESSAGES, MESSAGE_IDS[0].encode(), bytes(raw))
        reopened = self.reopen(store, directory)
        with reopened.read() as tx, pytest.raises(StoreDamaged, match="checksum") as caught:
            tx.message(MESSAGE_IDS[0])
        assert "'messages'" in str(caught.value) and MESSAGE_IDS[0] in str(caught.value)
        with reopened.read() as tx, pytest.raises(StoreDamaged, match="checksum"):
            list(tx.pending(CHILD))

    def test_a_store_from_before_checksums_is_upgraded_by_a_writer(self, directory: Path) -> None:
        store = self.make_store(directory)
        store.transact(populate)
        before = self.read(store)
        store.close()
        as_format_3(directory)  # a database per table, as treemail kept it before checksums
        env = lmdb.open(str(directory), max_dbs=16)  # strip checksums and the format marker
        with env.begin(write=True) as tx:
            tx.drop(env.open_db(b"meta", txn=tx))
            for table in Table:
                db = env.open_db(table.encode(), txn=tx)
                for key, raw in list(tx.cursor(db=db)):
                    tx.put(key, raw[:-CHECKSUM_BYTES], db=db)
        env.close()
        with pytest.raises(StoreFormatUnknown, match="predates record checksums"):
            LmdbStore.open(directory, readonly=True)
        assert self.read(self.make_store(directory)) == before
        self.opened[-1].close()
        reader = LmdbStore.open(directory, readonly=True)
        assert self.read(reader) == before
        reader.close()

    def test_a_store_of_an_unknown_format_is_refused(self, directory: Path) -> None:
        self.make_store(directory).close()
        self.overwrite(directory, b"meta", b"format", b"treemail-store 99")
        for readonly in (False, True):
            with pytest.raises(StoreFormatUnknown, match="treemail-store 99"):
                LmdbStore.open(directory, readonly=readonly)

    def counter_names(self, store: Store) -> set[str]:
        assert isinstance(store, LmdbStore)
        with store.raw_rows() as rows:
            return {key.decode() for key, _ in rows(Table.COUNTERS)}

    # -- durability ------------------------------------------------------------------------

    def test_data_survives_close_and_reopen(self, directory: Path) -> None:
        store = self.make_store(directory)
        store.transact(populate)
        store.transact(mutate_everything)
        before = self.read(store)
        store.close()
        again = self.make_store(directory)
        assert self.read(again) == before
        # last_seq came back too: numbering goes on where it stopped.
        assert again.transact(lambda tx: tx.append(ROOT, "k", {})).seq == 3

    def test_is_durable_unless_told_otherwise(self, directory: Path) -> None:
        durable = self.make_store(directory / "a")
        fast = self.make_store(directory / "b", sync=False)
        assert durable._env.flags()["sync"] and durable._env.flags()["metasync"]
        assert not fast._env.flags()["sync"]

    # -- map growth ------------------------------------------------------------------------

    def test_tiny_map_grows_and_every_write_lands(self, directory: Path) -> None:
        store = self.make_store(directory, sync=False, map_size=64 * 1024)
        body = "x" * 3000
        for n in range(200):

            def put(tx: WriteTxn, n: int = n) -> None:
                tx.put_message(message(f"m{n:04}", CHILD, n, body=body))

            store.transact(put)
        store.transact(lambda tx: [tx.append(ROOT, "big", {"blob": body * 10}) for _ in range(50)])
        assert store._env.info()["map_size"] > 64 * 1024
        with store.read() as tx:
            assert [m.seq for m in tx.pending(CHILD)] == list(range(200))
            assert all(m.body == body for m in tx.pending(CHILD))
            assert [e.seq for e in tx.events(ROOT)] == list(range(1, 51))

    def test_work_rerun_after_map_full_applies_once(self, directory: Path) -> None:
        store = self.make_store(directory, sync=False, map_size=64 * 1024)
        runs: list[int] = []

        def work(tx: WriteTxn) -> int:
            runs.append(1)
            total = tx.add(CounterName("n"), 1)
            tx.append(ROOT, "once", {})
            for n in range(100):  # ~400 KB: cannot fit in the first map
                tx.put_message(message(f"m{n:04}", CHILD, n, body="y" * 4000))
            return total

        assert store.transact(work) == 1
        assert len(runs) > 1
        with store.read() as tx:
            assert tx.count(CounterName("n")) == 1
            assert [e.seq for e in tx.events(ROOT)] == [1]
            assert len(list(tx.pending(CHILD))) == 100

    def test_map_full_swallowed_inside_a_savepoint_still_retries(self, directory: Path) -> None:
        store = self.make_store(directory, sync=False, map_size=64 * 1024)

        def work(tx: WriteTxn) -> None:
            try:
                with tx.savepoint() as sp:
                    sp.put_message(message("big", CHILD, 1, body="z" * 200_000))
            except Exception:  # a careless caller: the send must not be lost anyway
                pass
            tx.add(CounterName("n"), 1)  # small enough to commit on the full map

        store.transact(work)
        with store.read() as tx:
            assert [m.message_id for m in tx.pending(CHILD)] == ["big"]
            assert tx.count(CounterName("n")) == 1

    def test_growth_waits_for_a_reader_on_another_thread(self, directory: Path) -> None:
        # Growing the map invalidates every open LMDB txn of the process; a reader that is
        # mid-read on another thread must be waited for, not broken.
        store = self.make_store(directory, sync=False, map_size=64 * 1024)
        store.transact(populate)
        reading, release = threading.Event(), threading.Event()
        seen: list[Session | None] = []

        def reader() -> None:
            with store.read() as tx:
                reading.set()
                release.wait(10)
                seen.append(tx.session(ROOT))

        def big(tx: WriteTxn) -> None:
            for n in range(50):
                tx.put_message(message(f"m{n:04}", CHILD, n + 10, body="w" * 4000))

        threads = [
            threading.Thread(target=reader),
            threading.Thread(target=store.transact, args=(big,)),
        ]
        threads[0].start()
        assert reading.wait(10)
        threads[1].start()
        time.sleep(0.3)
        assert threads[1].is_alive()  # the writer waits to grow the map
        release.set()
        for thread in threads:
            thread.join(10)
        assert seen == [session(ROOT, ROOT, "main", 1)]
        with store.read() as tx:
            assert len(list(tx.pending(CHILD))) == 52

    def test_growth_stops_at_max_map_size(self, directory: Path) -> None:
        store = self.make_store(directory, sync=False, map_size=64 * 1024, max_map_size=256 * 1024)
        store.transact(lambda tx: tx.add(CounterName("n"), 1))
        huge = "h" * (512 * 1024)
        with pytest.raises(StorageError, match="max_map_size"):
            store.transact(lambda tx: tx.put_message(message("m", CHILD, 1, body=huge)))
        # Nothing of the failed work was kept, and the store still works.
        with store.read() as tx:
            assert tx.message("m") is None
        assert store.transact(lambda tx: tx.add(CounterName("n"), 1)) == 2

    # -- misuse and damage -----------------------------------------------------------------

    def test_txn_used_after_transact_raises_storage_error(self, directory: Path) -> None:
        store = self.make_store(directory)
        leaked = store.transact(lambda tx: tx)
        with pytest.raises(StorageError):
            leaked.add(CounterName("n"), 1)

    def test_transact_inside_transact_raises_instead_of_deadlocking(self, directory: Path) -> None:
        store = self.make_store(directory)
        with pytest.raises(StorageError, match="inside transact"):
            store.transact(lambda tx: store.transact(lambda inner: inner.add(CounterName("n"), 1)))

    @pytest.mark.parametrize(
        ("raw", "reason"),
        [(b"\xff{not json", "JSON is malformed"), (b'{"session_id": 5}', r"\$\.session_id")],
    )
    def test_damaged_record_raises_storage_error(
        self, directory: Path, raw: bytes, reason: str
    ) -> None:
        store = self.make_store(directory)
        store.transact(populate)
        store.close()
        # The checksum is right: the payload itself is what cannot be decoded.
        self.overwrite(directory, b"sessions", CHILD.encode(), encode(raw, CHILD.encode()))
        store = self.make_store(directory)
        with store.read() as tx, pytest.raises(StoreDamaged, match=reason) as caught:
            tx.session(CHILD)
        assert "'sessions'" in str(caught.value) and CHILD in str(caught.value)
        with store.read() as tx, pytest.raises(StorageError):
            list(tx.tree(ROOT))
