"""The feed of a ``PostgresStore``: numbered in commit order without a row every write bumps.

The port numbers the feed densely from 1, in the order its events were committed, and a
reader must never see a number appear behind one it has already read. LMDB gets that for
free (one writer: the next number is the feed's size). On PostgreSQL, a stored "feed end"
that every append reads and bumps is a hot row: every write transaction of every daemon
touches it, so two of them can never commit at once, and the store's writes are serial.

What this store does instead (the gap problem every PostgreSQL event store meets):

* An append stores ``(xid, idx, event)``: ``xid`` is the writing transaction's id
  (``pg_current_xact_id()``, 64 bits: it never wraps), ``idx`` its own running count. No
  number is taken, nothing shared is read or written: appends of concurrent transactions
  touch no common row.
* The feed's order is ``(xid, idx)``, and a reader sees only the rows with ``xid`` below its
  snapshot's horizon (``pg_snapshot_xmin``: the oldest transaction still in progress when
  the snapshot was taken). Every transaction below the horizon has ended, so the rows below
  it are final: a transaction that commits later has an ``xid`` at or above the horizon,
  and orders after every row a reader could have seen. The horizon only grows, so no row
  ever appears behind one already read. Within one transaction, ``idx`` keeps append order.
* Why ``xid`` and not a sequence: a sequence hands numbers out when rows are written, not
  when they commit, so number 7 may commit after 8 was read, and nothing in a snapshot says
  which numbers are still in flight. A transaction's ``xid`` is exactly that: the snapshot
  lists the ones in flight. And why this order is the commit order "as seen by readers": a
  transaction that saw another's writes began after that one committed, so got its ``xid``
  later and orders after it; two that never saw each other are concurrent, and the order
  between them is one no reader could tell from the commits it saw.
* A number is an event's rank in that order. ``n`` keeps the ranks already given out: the
  numberer (``number``, run after commits, one at a time across every daemon under an
  advisory lock, off the write path) gives the next ranks to the rows below its horizon. A
  reader reads the numbered rows by ``n`` and ranks the unnumbered ones below its horizon
  itself, from the largest ``n``, exactly as the numberer will: numbers are a function of the
  committed rows, and the numberer only saves readers the counting. A store nobody numbers
  (a crash, a reader alone) is read correctly, only slower.
* The price: an event becomes visible in the feed once every transaction that began writing
  before its own has ended, not the moment its own commits (a session's own log,
  ``events``, shows it at once). A long transaction anywhere on the server holds the feed
  back while it runs; treemail's own write transactions last milliseconds.

A write transaction reads the feed through a reader's connection, not its own snapshot: the
rows it appended itself have no number until it commits, and a group commit's reads must
not hold its transaction's snapshot back on the feed. So inside one, ``feed`` is the
committed feed, and ``feed_end`` adds the events it appended (what the port promises of a
savepoint's end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import psycopg

__all__ = ["FEED_TABLES", "FeedQueries", "number"]

# The feed's table (schema version 3): its rows, the tail not numbered yet, the ranks given.
FEED_TABLES = (
    "CREATE TABLE {s}.feed (xid xid8 NOT NULL, idx bigint NOT NULL, event bytea NOT NULL, "
    "n bigint UNIQUE, PRIMARY KEY (xid, idx))",
    "CREATE INDEX feed_tail ON {s}.feed (xid, idx) WHERE n IS NULL",
)

# The rows below the reader's horizon that have no number yet, each with the number it has
# (the largest given plus its rank among them).
_TAIL = ("SELECT top.m + row_number() OVER (ORDER BY f.xid, f.idx) AS n, f.event, f.xid, "
         "f.idx FROM {s}.feed f, (SELECT coalesce(max(n), 0) AS m FROM {s}.feed) top "
         "WHERE f.n IS NULL AND f.xid < pg_snapshot_xmin(pg_current_snapshot())")


@attrs.frozen
class FeedQueries:
    """The feed's statements for one schema."""

    append: str
    after: str
    end: str
    number: str
    lock: str
    waiting: str

    @classmethod
    def of(cls, q: Callable[[str], str]) -> FeedQueries:
        """The statements, each composed by ``q`` (``postgres_sql.composer``)."""
        return cls(
            append=q("INSERT INTO {s}.feed (xid, idx, event) "
                     "VALUES (pg_current_xact_id(), %s, %s)"),
            # With each event's stored row, which the reader follows next anyway.
            after=q("SELECT f.n, f.event, r.value FROM (SELECT n, event FROM {s}.feed "
                    "WHERE n > %s UNION ALL SELECT n, event FROM (" + _TAIL + ") tail "
                    "WHERE n > %s) f LEFT JOIN {s}.rows r ON r.tbl = 'events' AND "
                    "r.key = f.event ORDER BY f.n"),
            end=q("SELECT (SELECT coalesce(max(n), 0) FROM {s}.feed) + (SELECT count(*) FROM "
                  "{s}.feed WHERE n IS NULL AND xid < pg_snapshot_xmin(pg_current_snapshot()))"),
            number=q("UPDATE {s}.feed f SET n = tail.n FROM (" + _TAIL + ") tail "
                     "WHERE f.xid = tail.xid AND f.idx = tail.idx"),
            lock="SELECT pg_advisory_xact_lock(%s, %s)",
            waiting=q("SELECT EXISTS (SELECT 1 FROM {s}.feed WHERE n IS NULL)"),
        )


def number(conn: psycopg.Connection[Any], queries: FeedQueries, lock: tuple[int, int]) -> int:
    """Give the next numbers to the rows below the horizon (one numberer at a time: the lock
    is taken before the statement's snapshot, so each sees the previous one's numbers).
    Returns how many rows it numbered. Asynchronous commit: a numbering lost in a crash is
    redone with the same numbers, as they are a function of the committed rows."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")
        conn.execute(queries.lock, lock)
        return conn.execute(queries.number).rowcount
