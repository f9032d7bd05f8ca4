"""Format 4 (one key space), format 3 (tally rows) and the upgrade of the stores older
treemails wrote.

A format 3 store kept each table in a database of its own; a format 2 store also kept each
session's last event seq in a ``last_seq`` table and every counter in ``counters``; a store
from before checksums had no marker and no checksums. A writer upgrades any of them in place
to exactly the rows a format 4 store holds; a reader refuses them and says how to upgrade."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tests.unit.test_verify import contents, made
from treemail.adapters.store.codec import CHECKSUM_BYTES, decode, encode
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.verify import main as verify_main
from treemail.core.errors import StoreDamaged, StoreFormatUnknown
from treemail.core.keys import Table, Tally, logical_key, tallied_name


def as_format_3(directory: Path) -> None:
    """Rewrite a current store the way format 3 kept it: each table in its own database,
    under the table's own keys, the values (checksums included) the same bytes."""
    env = lmdb.open(str(directory), max_dbs=16)
    with env.begin(write=True) as tx:
        rows = env.open_db(b"rows", txn=tx)
        for stored, raw in list(tx.cursor(db=rows)):
            table, key = logical_key(bytes(stored))
            tx.put(key, raw, db=env.open_db(table.encode(), txn=tx))
        for table in Table:  # format 3 made every table's database, empty or not
            env.open_db(table.encode(), txn=tx)
        tx.drop(rows, delete=True)
        tx.put(b"format", b"treemail-store 3", db=env.open_db(b"meta", txn=tx))
    env.close()


def as_format_2(directory: Path) -> None:
    """Rewrite a current store the way format 2 kept it."""
    as_format_3(directory)
    env = lmdb.open(str(directory), max_dbs=16)
    with env.begin(write=True) as tx:
        tally_db, counters = env.open_db(b"tally", txn=tx), env.open_db(b"counters", txn=tx)
        last_seq = env.open_db(b"last_seq", txn=tx)
        for key, raw in list(tx.cursor(db=tally_db)):
            tally = decode(Tally, raw, db="tally", key=key)
            tx.put(key, encode(tally.last_event, key), db=last_seq)
            for slot, n in tally.counters.items():
                name = tallied_name(key, slot).encode()
                tx.put(name, encode(n, name), db=counters)
        tx.drop(tally_db, delete=True)
        tx.put(b"format", b"treemail-store 2", db=env.open_db(b"meta", txn=tx))
    env.close()


def without_checksums(directory: Path) -> None:
    """Rewrite a format 2 store the way treemail wrote it before checksums: no marker."""
    env = lmdb.open(str(directory), max_dbs=16)
    with env.begin(write=True) as tx:
        tx.drop(env.open_db(b"meta", txn=tx))
        for name in [*(table.encode() for table in Table if table is not Table.TALLY),
                     b"last_seq"]:
            db = env.open_db(name, txn=tx)
            for key, raw in list(tx.cursor(db=db)):
                tx.put(key, raw[:-CHECKSUM_BYTES], db=db)
    env.close()


def databases(directory: Path) -> set[bytes]:
    env = lmdb.open(str(directory), max_dbs=16, readonly=True)
    with env.begin() as tx:
        names = {bytes(key) for key, _ in tx.cursor()}
    env.close()
    return names


def as_format_2_without_checksums(directory: Path) -> None:
    as_format_2(directory)
    without_checksums(directory)


@pytest.mark.parametrize(("older", "said"), [
    (as_format_3, "has format b'treemail-store 3'"),
    (as_format_2, "has format b'treemail-store 2'"),
    (as_format_2_without_checksums, "predates record checksums"),
], ids=["format 3", "format 2", "before checksums"])
def test_a_writer_upgrades_an_older_store_to_the_rows_of_a_new_one(
        tmp_path: Path, older: Any, said: str) -> None:
    directory = made(tmp_path / "s")
    before = contents(directory)
    assert any(tally.counters for tally in before[Table.TALLY].values())  # it has tallies
    assert all(before[table] for table in (Table.MESSAGES, Table.PENDING, Table.REPLAY,
                                           Table.EVENTS, Table.FEED, Table.TREE))
    older(directory)
    assert b"rows" not in databases(directory) and b"messages" in databases(directory)
    if older is not as_format_3:
        assert b"last_seq" in databases(directory) and b"tally" not in databases(directory)
    with pytest.raises(StoreFormatUnknown, match="open it once for writing") as refused:
        LmdbStore.open(directory, readonly=True)
    assert said in str(refused.value)
    LmdbStore.open(directory).close()  # the upgrade
    assert contents(directory) == before
    # Every row moved into the one key space: no table's own database is left.
    assert databases(directory) == {b"meta", b"rows"}
    out = io.StringIO()
    assert verify_main(str(directory), out, out) == 0, out.getvalue()
    # And the store goes on numbering where it stopped.
    store = LmdbStore.open(directory, sync=False)
    session = next(iter(before[Table.TALLY]))
    seq = store.transact(lambda tx: tx.append(session.decode(), "Note", {})).seq
    assert seq == before[Table.TALLY][session].last_event + 1
    store.close()


def test_a_failed_upgrade_leaves_the_older_store_as_it_was(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    as_format_2(directory)
    env = lmdb.open(str(directory), max_dbs=16)  # a counter row that fails its checksum
    with env.begin(write=True) as tx:
        tx.put(b"inbox/x", b"1\x00\x00\x00\x00", db=env.open_db(b"counters", txn=tx))
    env.close()
    with pytest.raises(StoreDamaged, match="checksum"):
        LmdbStore.open(directory)
    assert b"tally" not in databases(directory) or _empty(directory, b"tally")
    assert b"last_seq" in databases(directory)


def _empty(directory: Path, name: bytes) -> bool:
    env = lmdb.open(str(directory), max_dbs=16, readonly=True)
    with env.begin() as tx:
        entries: int = tx.stat(env.open_db(name, txn=tx, create=False))["entries"]
    env.close()
    return entries == 0
