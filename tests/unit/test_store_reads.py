"""An LMDB transaction reads and decodes each row once: later reads of a row it already read
or wrote are answered from the transaction itself, and a savepoint undone forgets them.

The counts a send costs are pinned here too, so a change that adds store work to the send
path shows up as a failing number, not as a slower benchmark only."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import World
from treemail.adapters import lmdb_store
from treemail.adapters.lmdb_store import LmdbStore
from treemail.core.keys import Table
from treemail.core.store import WriteTxn


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, bytes]]:
    """Every (table, key) the LMDB store decodes, counted."""
    seen: Counter[tuple[str, bytes]] = Counter()
    original = lmdb_store.decode

    def decode(kind: Any, raw: bytes, *, db: str, key: bytes) -> Any:
        seen[(db, bytes(key))] += 1
        return original(kind, raw, db=db, key=key)

    monkeypatch.setattr(lmdb_store, "decode", decode)
    return seen


def test_a_send_decodes_each_row_once(tmp_path: Path, decoded: Counter[tuple[str, bytes]]
                                      ) -> None:
    store = LmdbStore.open(tmp_path, sync=False)
    world = World(store)
    lead = world.root("lead", {"*": "allow"})
    a, b = world.child(lead, "a", {"*": "allow"}), world.child(lead, "b", {"*": "allow"})
    world.activate(b)
    world.send(world.ctx(lead), b, "pending")  # the inbox counter exists: its read decodes
    ctx = world.ctx(a)
    decoded.clear()
    world.send(ctx, b, "hello")
    assert decoded and max(decoded.values()) == 1, decoded.most_common(3)
    # The sender, its run, the recipient (by handle), and the counters and last event seq
    # that exist; the inbox and pair counters are read by the guards and again by the upkeep.
    assert {table for table, _ in decoded} == {
        Table.SESSIONS, Table.RUNS, Table.HANDLES, Table.COUNTERS, Table.LAST_SEQ}
    store.close()


def test_an_undone_savepoint_is_not_read_back(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path, sync=False)
    store.transact(lambda tx: tx.add("n", 1))

    def work(tx: WriteTxn) -> int:
        assert tx.count("n") == 1  # read: now kept by the transaction
        with pytest.raises(RuntimeError), tx.savepoint() as inner:
            inner.add("n", 5)
            assert inner.count("n") == 6
            raise RuntimeError("undo")
        return tx.count("n")

    assert store.transact(work) == 1
    with store.read() as tx:
        assert tx.count("n") == 1
    store.close()


def test_a_row_written_is_read_back_without_lmdb(tmp_path: Path,
                                                  decoded: Counter[tuple[str, bytes]]) -> None:
    store = LmdbStore.open(tmp_path, sync=False)

    def work(tx: WriteTxn) -> int:
        tx.add("n", 2)
        return tx.add("n", 3)

    assert store.transact(work) == 5
    assert decoded[(Table.COUNTERS, b"n")] == 0  # absent, then the row it wrote
    store.close()
