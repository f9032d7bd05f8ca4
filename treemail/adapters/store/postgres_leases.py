"""``PgLeases``: tree leases in a PostgreSQL store (``leases.py`` says what they are for).

Tables (``postgres_schema``): ``members`` (each daemon sharing the store, alive while its
``expires`` is ahead) and ``leases`` (a tree's holder, address, token, ``expires``). Times
are the server's (``clock_timestamp()``), so the daemons' own clocks never disagree about
an expiry.

Every lease operation is one SERIALIZABLE transaction on a connection of its own, apart from
the writer's: a heartbeat must never wait behind a long write (its lease would lapse), and
never the other way round. Why SERIALIZABLE: a claim reads a lease and rewrites it, and the
fencing check of a write transaction (``fence_query``, run inside the writer's
transaction) reads the same row and locks it (``FOR SHARE``): a takeover's update of it then
waits for that write to commit, or that write (whose snapshot predates the takeover) fails
and runs again, to find the new token; never do both take effect as if the write came
after.

Tokens only grow: a release expires a lease instead of deleting it, so the next claim raises
the token the tree had.

Wake-ups (``listen``): a daemon that wants to hear the others at once LISTENs on the
store's channel; a write transaction that appended to the feed NOTIFYs it (queued with its
writes: no round trip of its own), and so do a release and a leave. A listener hears
``w:HOLDER`` (events to read) or ``r:HOLDER`` (trees to take) from every holder but itself;
after each (re)connection it is woken once with ``""``, for what it may have missed. A
server without NOTIFY (a pooler in transaction mode, say) is served by polling instead:
the feed follower's interval and the heartbeat (``[daemon.cluster] wakeups = "poll"``).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from treemail.adapters.store.leases import Lease, Member
from treemail.adapters.store.postgres_schema import lock_key
from treemail.adapters.store.postgres_sql import composed
from treemail.adapters.store.postgres_txn import RETRYABLE, lost
from treemail.core.errors import StorageError

__all__ = ["PgLeases", "birth_query", "fence_query"]

T = TypeVar("T")

_ATTEMPTS = 10


def fence_query(schema: str) -> sql.Composed:
    """The stored lease of each tree named (an array): its holder, token, and whether it was
    live when the transaction began. Read (and share-locked) in the writer's transaction, whose
    snapshot may predate a renewal or a claim made since on the lease connection: hence the
    transaction's start time (a lease live then and renewed since is live), and a token
    lower than the one held means a claim this snapshot does not see yet (run again)."""
    return composed(
        schema, "SELECT tree, holder, token, expires > transaction_timestamp() FROM {s}.leases "
        "WHERE tree = ANY(%s::text[]) FOR SHARE")


def birth_query(schema: str) -> sql.Composed:
    """Leases (token 1) for the trees a write transaction creates, inserted by that very
    transaction: a tree never exists without its owner's lease (holder, address, seconds,
    trees)."""
    return composed(
        schema, "INSERT INTO {s}.leases SELECT t, %s, %s, 1, clock_timestamp() + "
        "make_interval(secs => %s) FROM unnest(%s::text[]) AS t")


class PgLeases:
    """The ``Leases`` of one ``PostgresStore``, for this process as one holder."""

    def __init__(self, conninfo: str, schema: str, where: str) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._where = where
        self._holder = uuid.uuid4().hex
        self._address = ""
        self._duration = 0.0
        self._lock = threading.Lock()  # one lease transaction at a time, on ``_conn``
        self._held: dict[str, int] = {}
        self._held_lock = threading.Lock()  # ``held`` is read by the writer's fence check
        self._conn: psycopg.Connection[Any] | None = None
        # The store's channel: letters, digits and _ only, so it is quoted by nothing.
        self.channel = f"treemail_{lock_key(schema) & 0xFFFFFFFF:08x}"
        self.notifying = False  # whether writes and releases NOTIFY (``listen``)
        self._listening = threading.Event()
        self._listener: threading.Thread | None = None

    @property
    def holder(self) -> str:
        return self._holder

    def _q(self, text: str) -> sql.Composed:
        return composed(self._schema, text)

    def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work`` in one SERIALIZABLE transaction, again after a conflict or a lost
        connection (lease operations are idempotent for their holder)."""
        with self._lock:
            for attempt in range(_ATTEMPTS):
                conn = self._connection()
                try:
                    with conn.transaction():
                        return work(conn)
                except psycopg.Error as exc:
                    if lost(exc):
                        self._drop()
                    elif not isinstance(exc, RETRYABLE):
                        raise StorageError(f"postgresql refused a lease operation on "
                                           f"{self._where!r}: {exc}", path=self._where) from exc
                    if attempt == _ATTEMPTS - 1:
                        raise StorageError(f"the leases of {self._where!r} could not be "
                                           f"updated ({exc}); retry later",
                                           path=self._where) from exc
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** attempt)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop()
            try:
                self._conn = psycopg.connect(self._conninfo, autocommit=True,
                                             application_name="treemail-leases")
            except psycopg.Error as exc:
                raise StorageError(f"cannot connect to the store at {self._where!r}: {exc}",
                                   path=self._where) from exc
            self._conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def close(self) -> None:
        self._listening.clear()
        if self._listener is not None:
            self._listener.join()
            self._listener = None
        with self._lock:
            self._drop()

    def notify(self, kind: str) -> str:
        """The statement that wakes the other listeners: ``w`` (the feed grew) or ``r``
        (trees were given up)."""
        return f"NOTIFY {self.channel}, '{kind}:{self._holder}'"

    def listen(self, woken: Callable[[str], None]) -> None:
        """Call ``woken`` (on a thread of its own) for each notification of another holder,
        and with ``""`` after each (re)connection; from now on writes NOTIFY too."""
        self.notifying = True
        self._listening.set()
        self._listener = threading.Thread(target=self._listen, args=(woken,), daemon=True,
                                          name="treemail-listen")
        self._listener.start()

    def _listen(self, woken: Callable[[str], None]) -> None:
        while self._listening.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True,
                                     application_name="treemail-listen") as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    woken("")
                    while self._listening.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if not note.payload.endswith(f":{self._holder}"):
                                woken(note.payload)
            except psycopg.Error:
                time.sleep(0.5)  # the server away: polling covers it meanwhile

    # -- the operations --------------------------------------------------------------------

    def join(self, address: str, duration: float) -> None:
        if duration <= 0:
            raise ValueError(f"a lease lasts a positive number of seconds, not {duration}")
        self._address, self._duration = address, duration
        self._run(lambda conn: conn.execute(self._q(
            "INSERT INTO {s}.members VALUES (%s, %s, clock_timestamp() + make_interval("
            "secs => %s)) ON CONFLICT (holder) DO UPDATE SET address = EXCLUDED.address, "
            "expires = EXCLUDED.expires"), (self._holder, address, duration)))

    def claim(self, tree: str) -> Lease:
        if self._duration <= 0:
            raise StorageError("join the store's members before claiming a tree")

        def work(conn: psycopg.Connection[Any]) -> Lease:
            row = conn.execute(self._q(
                "SELECT holder, address, token, expires > clock_timestamp() FROM {s}.leases "
                "WHERE tree = %s"), (tree,)).fetchone()
            if row is None:
                conn.execute(self._q(
                    "INSERT INTO {s}.leases VALUES (%s, %s, %s, 1, clock_timestamp() + "
                    "make_interval(secs => %s))"), (tree, self._holder, self._address,
                                                    self._duration))
                return Lease(tree, self._holder, self._address, 1, True)
            holder, address, token, live = str(row[0]), str(row[1]), int(row[2]), bool(row[3])
            if live and holder != self._holder:
                return Lease(tree, holder, address, token, True)
            if not live:  # a takeover (or our own lapsed lease): writes of the old token fail
                token += 1
            conn.execute(self._q(
                "UPDATE {s}.leases SET holder = %s, address = %s, token = %s, expires = "
                "clock_timestamp() + make_interval(secs => %s) WHERE tree = %s"),
                (self._holder, self._address, token, self._duration, tree))
            return Lease(tree, self._holder, self._address, token, True)

        got = self._run(work)
        if got.holder == self._holder:
            with self._held_lock:
                self._held[tree] = got.token
        return got

    def renew(self) -> list[str]:
        held = self.held()

        def work(conn: psycopg.Connection[Any]) -> set[str]:
            conn.execute(self._q(
                "UPDATE {s}.members SET expires = clock_timestamp() + make_interval(secs => %s)"
                " WHERE holder = %s"), (self._duration, self._holder))
            if not held:
                return set()
            rows = conn.execute(self._q(
                "UPDATE {s}.leases l SET expires = clock_timestamp() + make_interval(secs => "
                "%s) FROM unnest(%s::text[], %s::bigint[]) AS h(tree, token) WHERE l.tree = "
                "h.tree AND l.token = h.token AND l.holder = %s AND l.expires > "
                "clock_timestamp() RETURNING l.tree"),
                (self._duration, list(held), list(held.values()), self._holder)).fetchall()
            return {str(tree) for (tree,) in rows}

        kept = self._run(work)
        lost_trees = sorted(set(held) - kept)
        with self._held_lock:
            for tree in lost_trees:
                if self._held.get(tree) == held[tree]:
                    del self._held[tree]
        return lost_trees

    def release(self, tree: str) -> None:
        with self._held_lock:
            token = self._held.pop(tree, None)
        if token is not None:
            def work(conn: psycopg.Connection[Any]) -> None:
                conn.execute(self._q(
                    "UPDATE {s}.leases SET expires = '-infinity' WHERE tree = %s AND holder = "
                    "%s AND token = %s"), (tree, self._holder, token))
                if self.notifying:
                    conn.execute(self.notify("r"))

            self._run(work)

    def held(self) -> dict[str, int]:
        with self._held_lock:
            return dict(self._held)

    def terms(self) -> tuple[str, str, float] | None:
        """What a lease of a tree born in a write transaction says: holder, address,
        duration; None before ``join`` (a store not joined owns no tree)."""
        return (self._holder, self._address, self._duration) if self._duration > 0 else None

    def born(self, trees: Collection[str]) -> None:
        """Trees a committed write transaction created, with their leases (token 1)."""
        with self._held_lock:
            for tree in trees:
                self._held[tree] = 1

    def lease(self, tree: str) -> Lease | None:
        row = self._run(lambda conn: conn.execute(self._q(
            "SELECT holder, address, token, expires > clock_timestamp() FROM {s}.leases "
            "WHERE tree = %s"), (tree,)).fetchone())
        if row is None:
            return None
        return Lease(tree, str(row[0]), str(row[1]), int(row[2]), bool(row[3]))

    def expired(self) -> list[str]:
        rows = self._run(lambda conn: conn.execute(self._q(
            "SELECT tree FROM {s}.leases WHERE expires <= clock_timestamp() ORDER BY tree")
            ).fetchall())
        return [str(tree) for (tree,) in rows]

    def members(self) -> list[Member]:
        rows = self._run(lambda conn: conn.execute(self._q(
            "SELECT m.holder, m.address, count(l.tree) FROM {s}.members m LEFT JOIN "
            "{s}.leases l ON l.holder = m.holder AND l.expires > clock_timestamp() "
            "WHERE m.expires > clock_timestamp() GROUP BY m.holder, m.address "
            "ORDER BY count(l.tree), m.holder")).fetchall())
        return [Member(str(h), str(a), int(n)) for h, a, n in rows]

    def leave(self) -> None:
        with self._held_lock:
            held, self._held = self._held, {}

        def work(conn: psycopg.Connection[Any]) -> None:
            if held:
                conn.execute(self._q(
                    "UPDATE {s}.leases l SET expires = '-infinity' FROM unnest(%s::text[], "
                    "%s::bigint[]) AS h(tree, token) WHERE l.tree = h.tree AND l.token = "
                    "h.token AND l.holder = %s"), (list(held), list(held.values()),
                                                   self._holder))
            conn.execute(self._q("DELETE FROM {s}.members WHERE holder = %s"), (self._holder,))
            if self.notifying:
                conn.execute(self.notify("r"))

        if self._duration > 0:
            self._run(work)
