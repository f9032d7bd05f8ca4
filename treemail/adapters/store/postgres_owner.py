"""The owner lock of a ``PostgresStore``: who may write the store, and who holds it now.

A writer holds a session-level advisory lock of the server, keyed by the schema
(``postgres_schema.LOCK_SPACE`` and ``lock_key``), on each connection it writes through, for
as long as the store is open: shared by daemons sharing the store (each then owns its trees
through leases, ``postgres_fence``), exclusive for a store held alone. The server drops the
lock with the connection however its holder dies, so a lock is never left behind. A store
held alone records who holds it in its ``owner`` row (``describe``), so that a second opener
is refused with ``store:locked`` naming the holder (``locked``); one shared names the daemons
(the ``members`` table).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import msgspec
import psycopg

from treemail.adapters.store.postgres_schema import LOCK_SPACE, lock_key
from treemail.adapters.store.postgres_sql import composed
from treemail.core.errors import StoreLocked

__all__ = ["Owner"]


class Owner:
    """The owner lock of the store in ``schema``, shared (by daemons) or exclusive."""

    def __init__(self, schema: str, where: str, *, shared: bool) -> None:
        self._schema = schema
        self._where = where  # for messages: the URL without its password
        self._shared = shared

    def take(self, conn: psycopg.Connection[Any]) -> bool:
        """Take the lock on ``conn`` (autocommit): whether it was free to take."""
        how = "pg_try_advisory_lock_shared" if self._shared else "pg_try_advisory_lock"
        held = conn.execute(f"SELECT {how}(%s, %s)",
                            (LOCK_SPACE, lock_key(self._schema))).fetchone()
        return bool(held and held[0])

    def locked(self, conn: psycopg.Connection[Any]) -> StoreLocked:
        if not self._shared:
            shared = self._members(conn)
            if shared:
                return StoreLocked(
                    f"the store at {self._where!r} is shared by treemail daemons (at "
                    f"{', '.join(shared)}); stop them first, or open the store read-only "
                    "to look at it", path=self._where, pid="unknown",
                    holder={"role": "treemail daemons", "addresses": ", ".join(shared)})
        pid, holder = "unknown", {}
        try:
            row = conn.execute(composed(self._schema,
                                          "SELECT pid, holder FROM {s}.owner")).fetchone()
        except psycopg.Error:
            row = None
        if row is not None:
            pid = str(row[0])
            try:
                holder = {str(k): str(v) for k, v in msgspec.json.decode(row[1]).items()}
            except (msgspec.DecodeError, AttributeError):
                holder = {}
        role = holder.get("role", "another process")
        where = ", ".join(f"{k} {v}" for k, v in holder.items() if k != "role")
        return StoreLocked(
            f"the store at {self._where!r} is in use by {role} (pid {pid}"
            f"{', ' + where if where else ''}); stop it first, or open the store read-only "
            "to look at it", path=self._where, pid=pid, holder=holder)

    def _members(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Where the live daemons sharing the store are (none, if the store is held alone)."""
        try:
            rows = conn.execute(composed(
                self._schema, "SELECT address FROM {s}.members WHERE expires > "
                "clock_timestamp() ORDER BY address")).fetchall()
        except psycopg.Error:
            return []
        return [str(address) for (address,) in rows]

    def describe(self, conn: psycopg.Connection[Any], holder: Mapping[str, str]) -> None:
        conn.execute(composed(self._schema,
                              "INSERT INTO {s}.owner (pid, holder) VALUES (%s, %s) ON CONFLICT "
                              "(one) DO UPDATE SET pid = EXCLUDED.pid, holder = EXCLUDED.holder"),
                     (str(os.getpid()), msgspec.json.encode(dict(holder)).decode()))
        conn.commit()

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """Unlock and close a write connection. Unlock before closing: the server ends a
        closed connection's backend (and drops its locks) only after the close returns, and
        an opener right after this close must find the store free."""
        if not (conn.closed or conn.broken):
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
                how = "pg_advisory_unlock_shared" if self._shared else "pg_advisory_unlock"
                conn.execute(f"SELECT {how}(%s, %s)", (LOCK_SPACE, lock_key(self._schema)))
                conn.commit()
        conn.close()
