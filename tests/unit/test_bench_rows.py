"""The floor lines of the bench, ``(a)`` and ``(g)`` "bare LMDB writing a send's rows",
write exactly the rows the store writes for the same sends and drains, in the same
transactions: so the gap between a send and its floor is treemail's own code, nothing else."""

from __future__ import annotations

from pathlib import Path

import lmdb

from bench.rigs import Pair, RowsFloor, open_store
from treemail.core.keys import Table, table_of


def tables(env: lmdb.Environment) -> dict[Table, list[tuple[bytes, bytes]]]:
    """Every row by table, from the one database both keep them in (``keys.stored_key``)."""
    found: dict[Table, list[tuple[bytes, bytes]]] = {table: [] for table in Table}
    with env.begin() as txn:
        for stored, raw in txn.cursor(db=env.open_db(b"rows", txn=txn)):
            found[table_of(bytes(stored))].append((bytes(stored), bytes(raw)))
    return found


def test_the_floor_writes_the_rows_the_sends_wrote(tmp_path: Path) -> None:
    floor = RowsFloor(tmp_path / "floor", sync=False, rounds=3, per_round=7)
    pair = Pair(open_store(tmp_path / "store", sync=False))
    assert len(floor.sends) == 21 and len(floor.drains) == 3
    # one transaction per send: every send wrote at least its message, event and feed rows
    assert all(len(rows) >= 3 for rows in floor.sends)
    for _ in range(3):
        for _ in range(7):
            pair.send()
            floor.send()
        pair.deliver()
        floor.deliver()
    pair.store.close()
    store = lmdb.open(str(tmp_path / "store"), max_dbs=len(Table) + 4, readonly=True)
    ours, bare = tables(store), tables(floor.env)
    assert ours[Table.MESSAGES] and ours[Table.EVENTS]  # the comparison is not of empties
    assert bare == {table: rows for table, rows in ours.items()}
    assert not floor.sends and not floor.drains  # everything recorded was written
    store.close()
    floor.close()
