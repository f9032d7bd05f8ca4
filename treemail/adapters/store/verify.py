"""``treemail verify STORE``: every record's checksum, and every index rebuilt from the records.

A read-only pass over one consistent snapshot (it runs beside a live writer and never writes).
Each table is read raw and decoded, so one damaged record is reported by database and key and
the rest are still checked. Then every index is rebuilt from the records with the key layout
of ``treemail.core.keys`` and compared with what is stored: tree, handles, pending, each
tally's last event seq, the feed, the guard counters (recounted from the pending messages)
and the numbering counters (never behind the records they number). Any difference is damage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, TextIO, runtime_checkable

import attrs

from treemail.adapters.store.codec import decode
from treemail.adapters.store.factory import open_store
from treemail.core import keys
from treemail.core.errors import StorageError, TreemailError
from treemail.core.keys import (
    SESSIONS_COUNTER,
    VALUE_KINDS,
    Table,
    Tally,
    counter_kind,
    inbox_counter,
    pair_counter,
    runs_counter,
    seq_counter,
)
from treemail.core.records import Event, Message, Owner, Run, SendResult, Session

__all__ = ["RawRows", "Report", "main", "verify"]

Rows = Mapping[bytes, Any]


@runtime_checkable
class RawRows(Protocol):
    """A store that keeps its records as the codec's bytes and can show them undecoded, so a
    damaged one is reported instead of stopping the check (LMDB and PostgreSQL stores)."""

    def raw_rows(self) -> AbstractContextManager[Callable[[Table], Iterable[tuple[bytes, bytes]]]]:
        ...


@attrs.define
class Report:
    records: int = 0
    problems: list[str] = attrs.Factory(list)

    def damage(self, table: Table | str, key: bytes, what: str) -> None:
        self.problems.append(f"{table} {key!r}: {what}")


def verify(store: RawRows) -> Report:
    report = Report()
    with store.raw_rows() as raw:
        tables = {table: _decoded(table, raw(table), report) for table in Table}
    _check_records(tables, report)
    _check_indexes(tables, report)
    _check_events(tables, report)
    _check_counters(tables, report)
    return report


def _decoded(table: Table, rows: Iterable[tuple[bytes, bytes]], report: Report) -> dict[bytes, Any]:
    kind, found = VALUE_KINDS[table], {}
    for key, raw in rows:
        report.records += 1
        try:
            found[key] = decode(kind, raw, db=table, key=key)
        except StorageError as exc:
            report.damage(table, key, exc.message)
    return found


def _expect_keys(table: Table, rows: Rows, key_of: Callable[[Any], bytes], report: Report) -> None:
    for key, record in rows.items():
        if key_of(record) != key:
            report.damage(table, key, f"holds a record that belongs at {key_of(record)!r}")


def _check_records(t: Mapping[Table, dict[bytes, Any]], report: Report) -> None:
    _expect_keys(Table.SESSIONS, t[Table.SESSIONS], lambda s: keys.identity(s.session_id), report)
    _expect_keys(Table.RUNS, t[Table.RUNS], lambda r: keys.identity(r.run_id), report)
    _expect_keys(Table.MESSAGES, t[Table.MESSAGES], lambda m: keys.identity(m.message_id), report)
    _expect_keys(Table.APPROVALS, t[Table.APPROVALS],
                 lambda a: keys.identity(a.approval_id), report)
    _expect_keys(Table.EVENTS, t[Table.EVENTS], lambda e: keys.event(e.session_id, e.seq), report)
    sessions = t[Table.SESSIONS]
    for key, run in _typed(t[Table.RUNS], Run):
        if keys.identity(run.session_id) not in sessions:
            report.damage(Table.RUNS, key, f"belongs to session {run.session_id}, not stored")
    for key, message in _typed(t[Table.MESSAGES], Message):
        if keys.identity(message.recipient) not in sessions:
            report.damage(Table.MESSAGES, key, f"is for session {message.recipient}, not stored")
    for key, result in _typed(t[Table.REPLAY], SendResult):
        if keys.identity(result.message_id) not in t[Table.MESSAGES]:
            report.damage(Table.REPLAY, key, f"answers with message {result.message_id}, "
                          "not stored")


def _typed(rows: Rows, kind: type[Any]) -> Iterator[tuple[bytes, Any]]:
    return ((key, value) for key, value in rows.items() if isinstance(value, kind))


def _compare(table: Table, stored: Rows, rebuilt: Rows, report: Report) -> None:
    for key in sorted(stored.keys() | rebuilt.keys()):
        if key not in rebuilt:
            report.damage(table, key, f"index entry {stored[key]!r} has no record behind it")
        elif key not in stored:
            report.damage(table, key, f"index entry {rebuilt[key]!r} is missing")
        elif stored[key] != rebuilt[key]:
            report.damage(table, key, f"index says {stored[key]!r}, the records say "
                          f"{rebuilt[key]!r}")


def _check_indexes(t: Mapping[Table, dict[bytes, Any]], report: Report) -> None:
    sessions = [s for _, s in _typed(t[Table.SESSIONS], Session)]
    messages = [m for _, m in _typed(t[Table.MESSAGES], Message)]
    tree = {keys.tree(s.root_session_id, s.ordinal): s.session_id for s in sessions}
    handles = {keys.handle(s.root_session_id, s.handle): s.session_id
               for s in sessions if s.handle is not None and s.live}
    pending = {keys.pending(m.recipient, m.seq): m.message_id for m in messages if m.pending}
    _compare(Table.TREE, t[Table.TREE], tree, report)
    _compare(Table.HANDLES, t[Table.HANDLES], handles, report)
    _compare(Table.PENDING, t[Table.PENDING], pending, report)


def _check_events(t: Mapping[Table, dict[bytes, Any]], report: Report) -> None:
    events = t[Table.EVENTS]
    logs: dict[str, list[int]] = {}
    for _, event in _typed(events, Event):
        logs.setdefault(event.session_id, []).append(event.seq)
    for session_id, seqs in logs.items():
        if sorted(seqs) != list(range(1, len(seqs) + 1)):
            report.damage(Table.EVENTS, keys.events_of(session_id), "the log has gaps")
    last_seq = {keys.identity(sid): max(seqs) for sid, seqs in logs.items()}
    kept = {key: tally.last_event for key, tally in _typed(t[Table.TALLY], Tally)
            if tally.last_event}
    _compare(Table.TALLY, kept, last_seq, report)
    _check_feed(t[Table.FEED], events, report)


def _check_feed(feed: Rows, events: Rows, report: Report) -> None:
    for number, key in enumerate(sorted(feed), start=1):
        if keys.feed_number(key) != number:
            report.damage(Table.FEED, key, f"the feed skips from {number - 1}")
            break
    listed = Counter(feed.values())
    for key in events.keys() - listed.keys():
        report.damage(Table.EVENTS, key, "the event is not in the feed")
    # Each problem is filed under a row of the table it names: the feed row that lists a
    # missing event, the event the feed lists more than once.
    for key, event in feed.items():
        if event not in events:
            report.damage(Table.FEED, key, f"the feed lists the event {event!r}, which is not "
                          "stored")
    for event, times in listed.items():
        if times > 1 and event in events:
            report.damage(Table.EVENTS, event, f"the feed lists the event {times} times")


# The counters the send guards read, recounted here from the pending messages.
_GUARD_COUNTERS = (keys.Counter.INBOX, keys.Counter.PAIR)


def _check_counters(t: Mapping[Table, dict[bytes, Any]], report: Report) -> None:
    stored = {key.decode(errors="replace"): n for key, n in t[Table.COUNTERS].items()}
    stored |= {keys.tallied_name(owner, slot): n
               for owner, tally in _typed(t[Table.TALLY], Tally)
               for slot, n in tally.counters.items()}
    guards: Counter[str] = Counter()
    for _, m in _typed(t[Table.MESSAGES], Message):
        if m.pending and m.owner is Owner.AGENT and m.sender is not None:
            guards[inbox_counter(m.recipient)] += 1
            guards[pair_counter(m.sender, m.recipient)] += 1
    kept = {name: n for name, n in stored.items() if counter_kind(name) in _GUARD_COUNTERS}
    for name in sorted(kept.keys() | guards.keys()):
        if kept.get(name, 0) != guards.get(name, 0):
            report.damage(_kept_in(name), name.encode(), f"holds {kept.get(name, 0)}, the "
                          f"pending messages count {guards.get(name, 0)}")
    for name, floor in _floors(t).items():
        if stored.get(name, 0) < floor:
            report.damage(_kept_in(name), name.encode(), f"holds {stored.get(name, 0)}, below "
                          f"the {floor} already handed out")
    for name, value in stored.items():
        if value == 0:
            report.damage(_kept_in(name), name.encode(), "a counter at 0 is never kept")


def _kept_in(name: str) -> Table:
    return Table.COUNTERS if keys.counter_place(name) is None else Table.TALLY


def _floors(t: Mapping[Table, dict[bytes, Any]]) -> dict[str, int]:
    """Numbering counters: each at least the highest number it has handed out."""
    floors: Counter[str] = Counter()
    for _, m in _typed(t[Table.MESSAGES], Message):
        name = seq_counter(m.recipient)
        floors[name] = max(floors[name], m.seq)
    for _, run in _typed(t[Table.RUNS], Run):
        name = runs_counter(run.session_id)
        floors[name] = max(floors[name], run.number)
    floors[SESSIONS_COUNTER] = max((s.ordinal for _, s in _typed(t[Table.SESSIONS], Session)),
                             default=0)
    return dict(floors)


def main(path: str, out: TextIO, err: TextIO) -> int:
    """Verify the store ``path`` names (a directory or a store URL): 0 when sound, 1 on
    damage, 2 when it cannot be opened."""
    try:
        store = open_store(path, readonly=True)
    except TreemailError as exc:
        print(f"treemail verify: {exc}", file=err)
        return 2
    if not isinstance(store, RawRows):
        store.close()
        print(f"treemail verify: the store {path!r} keeps no stored bytes to check (memory: "
              "holds records as they are); verify a directory or a postgresql:// store",
              file=err)
        return 2
    try:
        report = verify(store)
    except StorageError as exc:  # damage below the records: LMDB's own pages
        print(f"treemail verify: {exc}", file=err)
        return 1
    finally:
        store.close()
    for problem in report.problems:
        print(f"damaged: {problem}", file=out)
    verdict = f"{len(report.problems)} problem(s)" if report.problems else "no damage found"
    print(f"treemail verify: {report.records} records in {len(Table)} tables checked; "
          f"{verdict}", file=out)
    return 1 if report.problems else 0
