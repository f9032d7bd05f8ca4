"""``treemail verify``: a sound store passes; damaged records and indexes are each reported.

The flip campaign damages one byte of a real ``data.mdb`` at a time. Each flip must end either
detected (verify, or opening the store, reports it) or provably harmless: every record of
every table reads back exactly as before the flip. Each verify runs in a forked child, so a
crash would be counted instead of killing the test run.
"""

from __future__ import annotations

import io
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tests.unit.conftest import World
from treemail.adapters.store.codec import decode, encode
from treemail.adapters.store.lmdb_files import DATA_FILE
from treemail.adapters.store.lmdb_format import MAX_DBS, ROWS_DB
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.verify import main as verify_main
from treemail.adapters.ui.cli import main as cli
from treemail.core import keys
from treemail.core.errors import StoreMissing
from treemail.core.keys import VALUE_KINDS, Table, Tally


def made(directory: Path) -> Path:
    """A store the engine wrote: a tree of three, mail pending, consumed and replayed."""
    store = LmdbStore.open(directory, sync=False)
    world = World(store)
    lead = world.root("lead", {"*": "allow"})
    peers = {"*": "allow"}
    scout, coder = world.child(lead, "scout", peers), world.child(lead, "coder", peers)
    for n in range(3):
        world.send(scout, coder, f"note {n} " + "x" * 200)
    world.send(coder, lead, "done")
    world.consume_all(lead)
    world.send(lead, scout, "again")
    store.close()
    return directory


def run_verify(directory: Path) -> tuple[int, str]:
    out = io.StringIO()
    return verify_main(str(directory), out, out), out.getvalue()


def tamper(directory: Path, table: Table, key: bytes, value: object | None) -> None:
    """Rewrite one row behind the store's back, with a correct checksum: index damage."""
    store = LmdbStore.open(directory, sync=False)
    store.write_raw(table, key, None if value is None else encode(value, key))
    store.close()


def test_a_sound_store_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = made(tmp_path / "s")
    assert cli(["verify", str(directory)]) == 0
    assert "no damage found" in capsys.readouterr().out


def test_verify_of_no_store_says_so(tmp_path: Path) -> None:
    code, text = run_verify(tmp_path / "nothing")
    assert code == 2 and StoreMissing.code in text
    assert not (tmp_path / "nothing").exists()


Rows = dict[Table, dict[bytes, Any]]


def first(rows: Rows, table: Table) -> tuple[bytes, Any]:
    return next(iter(sorted(rows[table].items())))


def _tally(rows: Rows, slot: str, value: int | None) -> tuple[Table, bytes, Tally]:
    """A session's tally row with its counter at ``slot`` set to ``value`` (None: dropped)."""
    key, tally = next((k, t) for k, t in sorted(rows[Table.TALLY].items()) if slot in t.counters)
    counters = {s: n for s, n in tally.counters.items() if s != slot}
    return Table.TALLY, key, Tally(tally.last_event, counters | ({} if value is None
                                                                 else {slot: value}))


def _last_event_off(rows: Rows) -> tuple[Table, bytes, Tally]:
    key, tally = next((k, t) for k, t in sorted(rows[Table.TALLY].items()) if t.last_event > 1)
    return Table.TALLY, key, Tally(1, tally.counters)


# Each damage: the rows -> (table, key, the value to write or None to delete, what verify says).
DAMAGE: dict[str, Callable[[Rows], tuple[Table, bytes, object | None, str]]] = {
    "pending entry dropped": lambda r: (Table.PENDING, first(r, Table.PENDING)[0], None,
                                        "is missing"),
    "pending entry invented": lambda r: (Table.PENDING, keys.pending(first(r, Table.SESSIONS)[1]
                                         .session_id, 999), "m", "no record behind it"),
    "handle pointing elsewhere": lambda r: (Table.HANDLES, first(r, Table.HANDLES)[0], "other",
                                            "the records say"),
    "tree entry dropped": lambda r: (Table.TREE, first(r, Table.TREE)[0], None, "is missing"),
    "inbox counter off": lambda r: (*_tally(r, "inbox", 9), "the pending messages count"),
    "sessions counter behind": lambda r: (Table.COUNTERS, b"sessions", 1, "already handed out"),
    "seq counter dropped": lambda r: (*_tally(r, "seq", None), "already handed out"),
    "last event seq off": lambda r: (*_last_event_off(r), "the records say"),
    "feed gap": lambda r: (Table.FEED, keys.feed(3), None, "the feed skips"),
    "feed duplicate": lambda r: (Table.FEED, keys.feed(4), r[Table.FEED][keys.feed(1)],
                                 "2 times"),
    "event dropped": lambda r: (Table.EVENTS, r[Table.FEED][keys.feed(2)], None, "not stored"),
    "message dropped": lambda r: (Table.MESSAGES, keys.identity(
        first(r, Table.PENDING)[1]), None, "no record behind it"),
    "replay answer dropped": lambda r: (Table.MESSAGES, keys.identity(
        first(r, Table.REPLAY)[1].message_id), None, "not stored"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_each_index_is_checked_against_the_records(tmp_path: Path, damage: str) -> None:
    directory = made(tmp_path / "s")
    table, key, value, said = DAMAGE[damage](contents(directory))
    tamper(directory, table, key, value)
    code, text = run_verify(directory)
    assert code == 1, text
    assert said in text, text


def test_a_damaged_record_is_named_and_the_rest_still_checked(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    found = contents(directory)
    key = next(iter(found[Table.PENDING].values())).encode()
    store = LmdbStore.open(directory, sync=False)
    with store.raw_rows() as rows:
        raw = bytearray(dict(rows(Table.MESSAGES))[key])
    raw[30] ^= 0x20
    store.write_raw(Table.MESSAGES, key, bytes(raw))
    store.close()
    code, text = run_verify(directory)
    assert code == 1
    assert f"messages {key!r}: checksum mismatch" in text
    # The pending entry now points at a record that no longer decodes: found too.
    assert "no record behind it" in text


@pytest.mark.parametrize("stray", [b"%s\x00\x14call", b"\x00\x14%s", b"%s-no-separator"])
def test_a_row_whose_key_belongs_to_no_table_is_damage(tmp_path: Path, stray: bytes) -> None:
    """A flipped tag or separator byte moves a row out of every table's range: verify says
    so (it used to stop on a KeyError, and the row was lost unseen)."""
    directory = made(tmp_path / "s")
    env = lmdb.open(str(directory), max_dbs=MAX_DBS)
    with env.begin(write=True) as txn:
        txn.put(stray % b"00000002-0000-4000-8000-000000000000", b"{}\x00\x00\x00\x00",
                db=env.open_db(ROWS_DB, txn=txn))
    env.close()
    code, text = run_verify(directory)
    assert code == 1
    assert "belongs to no table" in text


# -- single-byte flips in the real file ----------------------------------------------------


def contents(directory: Path) -> dict[Table, dict[bytes, Any]]:
    store = LmdbStore.open(directory, readonly=True)
    try:
        with store.raw_rows() as raw:
            return {t: {k: decode(VALUE_KINDS[t], v, db=t, key=k) for k, v in raw(t)}
                    for t in Table}
    finally:
        store.close()


def flip_outcome(source: Path, work: Path, position: int, bit: int,
                 before: dict[Table, dict[bytes, Any]]) -> str:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    shutil.copy(source / DATA_FILE, work / DATA_FILE)
    with (work / DATA_FILE).open("r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ bit]))
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        os.close(read_end)
        verdict = "silent"
        try:
            code, _ = run_verify(work)
            verdict = "detected" if code else ("harmless" if contents(work) == before
                                               else "silent")
        finally:
            os.write(write_end, verdict.encode())
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(child, 0)
    verdict = os.read(read_end, 64).decode()
    os.close(read_end)
    return verdict or f"crashed ({status})"


def test_every_single_byte_flip_is_detected_or_harmless(tmp_path: Path) -> None:
    source = made(tmp_path / "s")
    before = contents(source)
    size = (source / DATA_FILE).stat().st_size
    rng = random.Random(20261202)
    outcomes = Counter(
        flip_outcome(source, tmp_path / "w", rng.randrange(size), 1 << rng.randrange(8), before)
        for _ in range(120)
    )
    assert set(outcomes) <= {"detected", "harmless"}, outcomes
    assert outcomes["detected"] >= 10, outcomes  # the flips did reach the records
