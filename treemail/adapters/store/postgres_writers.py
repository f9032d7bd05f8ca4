"""The write connections of a ``PostgresStore``, and the thread that numbers its feed.

``Writers`` lends each ``transact`` a connection of its own, so that transactions of several
threads (the runtime's writer threads, ``adapters/runtime/writer.py``) run on the server at
once: up to ``size`` of them, each on a connection that holds the store's owner lock. A
store held alone holds that lock exclusively, which only one connection can: its size is
one, and its transactions run one after the other as before. A store shared by daemons
holds it shared, on every connection: transactions of different trees share no row (the
feed takes no number when written, ``postgres_feed``), so they commit side by side, and
those of one tree are kept apart by the writer (one lane per tree) and, should two meet
anyway on a row, by snapshot isolation (``PostgresStore``).

``Numberer`` gives the feed's numbers after commits, on a connection of its own, off every
write's path: a reader numbers what it finds unnumbered by itself, so a numberer that lags
(or never ran) costs readers time, never a wrong number.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg

from treemail.core.errors import StoreClosed

__all__ = ["Numberer", "Slot", "Writers"]

_log = logging.getLogger(__name__)

_GATHER = 0.05  # seconds the numberer lets commits gather before it numbers them


@attrs.define
class Slot:
    """A connection lent to one ``transact``: None once dropped (the next attempt dials)."""

    conn: psycopg.Connection[Any] | None


class Writers:
    """Up to ``size`` write connections, lent one per running transaction."""

    def __init__(self, size: int, where: str,
                 release: Callable[[psycopg.Connection[Any]], None]) -> None:
        self.size = size
        self._where = where
        self._release = release  # unlock and close a connection
        self._idle: list[psycopg.Connection[Any]] = []
        self._lent = 0
        self._closed = False
        self._cond = threading.Condition()

    def add(self, conn: psycopg.Connection[Any]) -> None:
        with self._cond:
            self._idle.append(conn)
            self._cond.notify()

    @contextmanager
    def lend(self) -> Iterator[Slot]:
        """A connection for one transaction (None: dial one), waiting while all are lent."""
        with self._cond:
            while not self._idle and self._lent >= self.size:
                if self._closed:
                    break
                self._cond.wait()
            if self._closed:
                raise StoreClosed(f"the store at {self._where!r} is closed; open it again",
                                  path=self._where)
            slot = Slot(self._idle.pop() if self._idle else None)
            self._lent += 1
        try:
            yield slot
        finally:
            with self._cond:
                self._lent -= 1
                keep = slot.conn is not None and not (slot.conn.closed or slot.conn.broken)
                if keep and not self._closed:
                    assert slot.conn is not None
                    self._idle.append(slot.conn)
                    slot.conn = None
                self._cond.notify_all()
            if slot.conn is not None:
                self._release(slot.conn)

    def drop(self, slot: Slot) -> None:
        """End the slot's connection (its locks go with it); the next attempt dials."""
        if slot.conn is not None:
            conn, slot.conn = slot.conn, None
            self._release(conn)

    def close(self) -> None:
        """Let the running transactions finish, then end every connection."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            while self._lent:
                self._cond.wait()
            idle, self._idle = self._idle, []
        for conn in idle:
            self._release(conn)


class Numberer:
    """A thread that numbers the feed when told that a commit appended to it, and again
    while rows it could not number yet (above the horizon) wait."""

    def __init__(self, dial: Callable[[], psycopg.Connection[Any]],
                 number: Callable[[psycopg.Connection[Any]], int],
                 waiting: Callable[[psycopg.Connection[Any]], bool]) -> None:
        self._dial = dial
        self._number = number
        self._waiting = waiting
        self._due = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def due(self) -> None:
        with self._lock:
            if self._stop:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="treemail-numberer")
                self._thread.start()
        self._due.set()

    def _serve(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        pause = 0.0
        while not self._stop:
            self._due.wait(timeout=pause or None)
            # Commits close together share one numbering: readers number a short tail
            # themselves at no cost worth a transaction per commit.
            time.sleep(_GATHER)
            self._due.clear()
            if self._stop:
                break
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._dial()
                self._number(conn)
                # Committed rows above the horizon wait for an older transaction to end:
                # look again soon (readers see them meanwhile, numbered by themselves).
                pause = 0.01 if self._waiting(conn) else 0.0
            except psycopg.Error as exc:  # the next commit, or the pause, tries again
                _log.debug("numbering the feed failed: %s", exc)
                if conn is not None:
                    conn.close()
                conn = None
                pause = 0.5
            except Exception as exc:  # a closed store, say: the readers number it anyway
                _log.debug("numbering the feed stopped: %s", exc)
                break
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._stop = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join()
