"""The LMDB store's refusals name the store: a store of a format this treemail does not know
(a newer one) is refused to readers and writers alike, and an older one to a reader, each
with the store's path in the message and in the error's details."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from tests.unit.test_store_format import as_format_2
from tests.unit.test_verify import made
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import StoreFormatUnknown


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
