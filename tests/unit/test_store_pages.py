"""The pages a send's commit writes: the one key space (``keys.stored_key``) puts a send's
rows side by side, so a commit dirties fewer pages than the same rows in a database per
table (format 3's layout). LMDB's own page numbers count them (``bench.beside.pinned``): a
reader held open from the first write stops page reuse, so every dirtied page is new."""

from __future__ import annotations

from pathlib import Path

import lmdb

from bench.beside import pinned
from bench.rigs import Pair, Write, open_store, recording
from treemail.core import keys
from treemail.core.keys import Table

SENDS = 60


def recorded_sends(tmp_path: Path) -> tuple[list[Write], list[list[Write]]]:
    """The rows of a pair's set-up and of each of its sends, with a drain every 20."""
    with recording() as setup:
        pair = Pair(open_store(tmp_path / "twin", sync=False))
    sends: list[list[Write]] = []
    for n in range(SENDS):
        with recording() as rows:
            pair.send()
        sends.append(rows)
        if n % 20 == 19:
            with recording() as rows:
                pair.deliver()
            sends.append(rows)
    pair.store.close()
    return setup, sends


def pages_per_commit(path: Path, setup: list[Write], sends: list[list[Write]],
                     one_space: bool) -> float:
    env = lmdb.open(str(path), map_size=1 << 28, sync=False, metasync=False,
                    max_dbs=len(Table) + 1)
    with env.begin(write=True):
        pass
    with pinned(env) as written:
        if one_space:
            db = env.open_db(b"rows")
            place = {table: db for table in Table}
        else:
            place = {table: env.open_db(table.encode()) for table in Table}

        def commit(rows: list[Write]) -> None:
            with env.begin(write=True) as txn:
                for table, key, value in rows:
                    stored = keys.stored_key(table, key) if one_space else key
                    if value is None:
                        txn.delete(stored, db=place[table])
                    else:
                        txn.put(stored, value, db=place[table])

        commit(setup)
        half = len(sends) // 2
        for rows in sends[:half]:  # past the trees' first pages
            commit(rows)
        before = written()
        for rows in sends[half:]:
            commit(rows)
        pages = (written() - before) / (len(sends) - half)
    env.close()
    return pages


def test_a_send_dirties_fewer_pages_in_the_one_key_space(tmp_path: Path) -> None:
    setup, sends = recorded_sends(tmp_path)
    one = pages_per_commit(tmp_path / "one", setup, sends, one_space=True)
    per_table = pages_per_commit(tmp_path / "per-table", setup, sends, one_space=False)
    assert one < per_table, (one, per_table)
    assert per_table - one >= 2, (one, per_table)  # whole pages, not noise: LMDB is exact


def test_the_store_writes_the_pages_of_its_rows_and_no_more(tmp_path: Path) -> None:
    """The store's own commits dirty what its rows in the one key space dirty: its layout
    is the one measured above, and it writes nothing else per send."""
    setup, sends = recorded_sends(tmp_path)
    floor = pages_per_commit(tmp_path / "one", setup, sends, one_space=True)
    store = open_store(tmp_path / "store", sync=False)
    with pinned(store._env) as written:
        pair = Pair(store)
        commits = 0
        for n in range(SENDS):
            if n == SENDS // 2:
                before, commits = written(), 0
            pair.send()
            commits += 1
            if n % 20 == 19:
                pair.deliver()
                commits += 2  # the recipient's boundary and its commit
        ours = (written() - before) / commits
    store.close()
    assert ours <= floor + 1, (ours, floor)
