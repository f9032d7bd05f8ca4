"""The LMDB store's refusals name the store: a store of a format this treemail does not know
(a newer one) is refused to readers and writers alike, and an older one to a reader, each
with the store's path in the message and in the error's details. And the corners of the
upgrade: an LMDB directory with no treemail tables, an empty store from before checksums,
format 2 sessions with only half of a tally, and a damaged format 2 row."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from tests.unit.test_store_format import as_format_2, as_format_3, databases
from tests.unit.test_verify import contents, made
from treemail.adapters.store.codec import encode
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import StorageError, StoreDamaged, StoreFormatUnknown
from treemail.core.keys import Table, Tally


def _mark(directory: Path, marker: bytes) -> None:
    env = lmdb.open(str(directory), max_dbs=16)
    with env.begin(write=True) as tx:
        tx.put(b"format", marker, db=env.open_db(b"meta", txn=tx))
    env.close()


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_newer_format_is_refused_naming_the_store(tmp_path: Path, readonly: bool) -> None:
    directory = made(tmp_path / "s")
    _mark(directory, b"treemail-store 99")
    with pytest.raises(StoreFormatUnknown) as refused:
        LmdbStore.open(directory, readonly=readonly)
    assert str(refused.value) == (
        f"store:unknown_format: the store at {str(directory)!r} has format "
        "b'treemail-store 99'; this treemail reads b'treemail-store 4' (and upgrades older "
        "ones): use the treemail that wrote it")
    assert refused.value.details["path"] == str(directory)


def test_a_writer_refused_a_store_leaves_it_to_be_opened_again(tmp_path: Path) -> None:
    # The refusal is kept (with its traceback, which holds the open's frame) while the store
    # is opened again: the refused open must have closed its environment, or LMDB refuses the
    # second one in this process for being already open, and hides the real refusal.
    directory = made(tmp_path / "s")
    _mark(directory, b"treemail-store 99")
    with pytest.raises(StoreFormatUnknown) as first:
        LmdbStore.open(directory)
    with pytest.raises(StoreFormatUnknown) as again:
        LmdbStore.open(directory)
    assert str(again.value) == str(first.value)


def test_an_older_format_is_refused_to_a_reader_naming_the_store(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    as_format_2(directory)
    with pytest.raises(StoreFormatUnknown) as refused:
        LmdbStore.open(directory, readonly=True)
    assert str(refused.value) == (
        f"store:unknown_format: the store at {str(directory)!r} has format "
        "b'treemail-store 2', older than this treemail's b'treemail-store 4'; open it once for "
        "writing (any treemail command that runs it) to upgrade it in place")
    assert refused.value.details["path"] == str(directory)


def test_an_lmdb_directory_without_treemail_tables_is_refused_to_a_reader(
        tmp_path: Path) -> None:
    # LMDB's own files, made by another program (or a writer stopped before its first
    # commit), with no marker and nothing in them: not a store of an older format to upgrade.
    lmdb.open(str(tmp_path / "s")).close()
    with pytest.raises(StoreDamaged) as refused:
        LmdbStore.open(tmp_path / "s", readonly=True)
    path = str(tmp_path / "s")
    assert refused.value.message == (
        f"{path!r} holds an LMDB file but not a treemail store (a table is missing)")
    assert refused.value.details["path"] == path


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_an_lmdb_file_with_a_plain_key_where_a_table_belongs_is_refused_typed(
        tmp_path: Path, readonly: bool) -> None:
    """Another program's LMDB file whose main database holds a plain ``rows`` key, where the
    store's table is a database: LMDB refuses to open it as one. A reader was given LMDB's
    own ``IncompatibleError``; both are told, typed, which store and why."""
    directory = tmp_path / "s"
    env = lmdb.open(str(directory))
    with env.begin(write=True) as tx:
        tx.put(b"rows", b"not a database")
    env.close()
    with pytest.raises(StorageError) as refused:
        LmdbStore.open(directory, readonly=readonly, sync=False)
    path = str(directory)
    assert type(refused.value) is StorageError
    assert refused.value.message.startswith(f"cannot open the store at {path!r}: ")
    assert "MDB_INCOMPATIBLE" in refused.value.message  # LMDB's reason
    assert refused.value.details == {"path": path}
    with pytest.raises(StorageError) as again:  # the refused open closed its environment
        LmdbStore.open(directory, readonly=readonly, sync=False)
    assert again.value.message == refused.value.message


def test_an_empty_pre_checksum_store_is_opened_by_a_writer_as_a_new_one(
        tmp_path: Path) -> None:
    directory = tmp_path / "s"
    _empty_pre_checksum_store(directory)
    store = LmdbStore.open(directory, sync=False)
    assert store.transact(lambda tx: tx.append("s", "Note", {})).seq == 1
    store.close()
    assert databases(directory) == {b"meta", b"rows"}  # no older table kept, last_seq too
    rows = contents(directory)  # a reader opens it: the marker was written
    assert {table: len(found) for table, found in rows.items() if found} == {
        Table.EVENTS: 1, Table.TALLY: 1, Table.FEED: 1}


def _empty_pre_checksum_store(directory: Path) -> None:
    """Every table's database and the last_seq table made, nothing in them, no marker."""
    env = lmdb.open(str(directory), max_dbs=16)
    for name in [*(table.encode() for table in Table), b"last_seq"]:
        env.open_db(name)
    env.close()


def _rows_of(directory: Path, name: bytes) -> dict[bytes, bytes]:
    env = lmdb.open(str(directory), max_dbs=16, readonly=True)
    with env.begin() as tx:
        rows = {bytes(k): bytes(v) for k, v in tx.cursor(db=env.open_db(name, txn=tx))}
    env.close()
    return rows


def _set_rows(directory: Path, name: bytes, rows: dict[bytes, bytes | None]) -> None:
    env = lmdb.open(str(directory), max_dbs=16)
    with env.begin(write=True) as tx:
        db = env.open_db(name, txn=tx)
        for key, raw in rows.items():
            if raw is None:
                tx.delete(key, db=db)
            else:
                tx.put(key, raw, db=db)
    env.close()


def test_format_2_owners_with_only_counters_or_only_a_last_seq_get_whole_tally_rows(
        tmp_path: Path) -> None:
    # Format 2 kept a session's last event seq and its tallied counters in separate rows;
    # the upgrade must keep a session that had only one of the two, the other part empty.
    directory = made(tmp_path / "s")
    before = contents(directory)[Table.TALLY]
    with_counters = next(key for key, tally in before.items() if tally.counters)
    as_format_2(directory)
    counters_only = with_counters
    last_seq_only = b"a-session-with-events-but-no-mail"
    _set_rows(directory, b"last_seq", {counters_only: None,
                                       last_seq_only: encode(7, last_seq_only)})
    LmdbStore.open(directory).close()
    after = contents(directory)[Table.TALLY]
    assert after[counters_only] == Tally(0, before[counters_only].counters)
    assert after[last_seq_only] == Tally(7, {})
    assert {key: after[key] for key in before if key != counters_only} == {
        key: tally for key, tally in before.items() if key != counters_only}
    assert databases(directory) == {b"meta", b"rows"}


def test_a_damaged_format_2_last_seq_row_is_named_by_its_table_and_key(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    as_format_2(directory)
    key = next(iter(_rows_of(directory, b"last_seq")))
    _set_rows(directory, b"last_seq", {key: b"3\x00\x00\x00\x00"})  # a wrong checksum
    with pytest.raises(StoreDamaged) as refused:
        LmdbStore.open(directory)
    assert refused.value.details == {"db": "last_seq", "key": key}
    assert f"in database 'last_seq' at key {key!r}" in str(refused.value)


def test_an_empty_store_from_before_checksums_is_refused_to_a_reader_as_an_older_store(
        tmp_path: Path) -> None:
    # Its tables exist, empty, without a marker: a treemail store a writer opens as a new
    # one, which a reader must call older (and say how to upgrade), not damaged or foreign.
    directory = tmp_path / "s"
    _empty_pre_checksum_store(directory)
    with pytest.raises(StoreFormatUnknown) as refused:
        LmdbStore.open(directory, readonly=True)
    assert str(refused.value) == (
        f"store:unknown_format: the store at {str(directory)!r} predates record checksums, "
        "older than this treemail's b'treemail-store 4'; open it once for writing (any "
        "treemail command that runs it) to upgrade it in place")
    LmdbStore.open(directory, sync=False).close()
    LmdbStore.open(directory, readonly=True).close()


def test_a_writer_stopped_before_its_marker_leaves_a_store_a_reader_opens_empty(
        tmp_path: Path) -> None:
    # The writer makes its rows database, then marks the store in a second transaction.
    env = lmdb.open(str(tmp_path / "s"), max_dbs=16)
    env.open_db(b"rows")
    env.close()
    store = LmdbStore.open(tmp_path / "s", readonly=True)
    try:
        with store.read() as tx:
            assert list(tx.sessions()) == []
    finally:
        store.close()


def test_a_failed_format_2_upgrade_names_the_damaged_counter_row(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    as_format_2(directory)
    _set_rows(directory, b"counters", {b"inbox/x": b"1\x00\x00\x00\x00"})  # a wrong checksum
    with pytest.raises(StoreDamaged) as refused:
        LmdbStore.open(directory)
    assert refused.value.details == {"db": "counters", "key": b"inbox/x"}


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_store_whose_marker_was_lost_is_damaged_not_older(tmp_path: Path,
                                                             readonly: bool) -> None:
    # Its rows are the current format's: a reader must not send the user to a writer to
    # "upgrade" it, and a writer must not take it for a store from before checksums (it
    # failed with a KeyError on the counters table such a store had).
    directory = made(tmp_path / "s")
    env = lmdb.open(str(directory), max_dbs=16)
    with env.begin(write=True) as tx:
        tx.delete(b"format", db=env.open_db(b"meta", txn=tx))
    env.close()
    with pytest.raises(StoreDamaged) as refused:
        LmdbStore.open(directory, readonly=readonly)
    assert refused.value.message == (
        f"the store at {str(directory)!r} holds rows but no format marker: its meta database "
        "is damaged; restore the store from a copy")
    assert refused.value.details == {"path": str(directory)}
    assert databases(directory) == {b"meta", b"rows"}  # the writer changed nothing


def _compact_format_3(source: Path, directory: Path) -> dict[Table, dict[bytes, object]]:
    """A format 3 copy of ``source`` with no free pages (LMDB's compacting copy), 73 KB: its
    upgrade must take new pages for every row it moves. Returns the rows it holds."""
    before = contents(source)
    as_format_3(source)
    directory.mkdir(mode=0o700)
    env = lmdb.open(str(source), max_dbs=16)
    env.copy(str(directory), compact=True)
    env.close()
    (directory / "data.mdb").chmod(0o600)
    return before


@pytest.mark.parametrize(("max_map_size", "grown"), [(1 << 26, 224 << 10),
                                                     (160 << 10, 160 << 10)])
def test_an_upgrade_that_outgrows_the_map_doubles_it_up_to_max_map_size_and_starts_over(
        tmp_path: Path, max_map_size: int, grown: int) -> None:
    before = _compact_format_3(made(tmp_path / "s"), tmp_path / "c")
    store = LmdbStore.open(tmp_path / "c", sync=False, map_size=112 << 10,
                           max_map_size=max_map_size)
    try:
        assert store._env.info()["map_size"] == grown
    finally:
        store.close()
    assert contents(tmp_path / "c") == before
    assert databases(tmp_path / "c") == {b"meta", b"rows"}


def test_an_upgrade_past_max_map_size_is_refused_and_leaves_the_store_to_upgrade_later(
        tmp_path: Path) -> None:
    directory = tmp_path / "c"
    before = _compact_format_3(made(tmp_path / "s"), directory)
    with pytest.raises(StorageError) as refused:
        LmdbStore.open(directory, sync=False, map_size=112 << 10, max_map_size=112 << 10)
    assert refused.value.message == (f"upgrading the store at {str(directory)!r} needs more "
                                     f"than max_map_size ({112 << 10} bytes)")
    assert b"messages" in databases(directory)  # still format 3
    LmdbStore.open(directory, sync=False, map_size=112 << 10).close()
    assert contents(directory) == before
