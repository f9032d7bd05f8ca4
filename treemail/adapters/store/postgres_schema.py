"""The layout of a PostgreSQL store, its version, and the way from an older one to this one.

A store is one PostgreSQL schema (``treemail`` unless the URL says ``?schema=NAME``), so
several stores can share a database and dropping a schema drops a store. It holds:

* ``rows (tbl, key, value)``: every row of every ``Table``, keyed by the bytes of
  ``treemail.core.keys`` and holding the codec's bytes (compact JSON and a checksum), as the
  LMDB store does. ``bytea`` compares byte by byte, so the primary key's order is the order
  the port promises, and every read is a point lookup or a range over one owner's keys;
* ``feed (xid, idx, event, n)``: the global feed, numbered in commit order without a row
  every append bumps (``postgres_feed`` says how, and why);
* ``owner``: who holds the store as its writer (pid and a description), for a refused
  second writer to be told; the hold itself is a lock of the server (``postgres_store``);
* ``members (holder, address, expires)``: the daemons sharing the store, each alive while its
  heartbeat keeps ``expires`` in the future (placement counts them: ``postgres_leases``);
* ``leases (tree, holder, address, token, expires)``: which daemon owns each tree, and the
  fencing token every write of that owner checks (``postgres_leases``);
* ``meta``: the schema's version.

Version 3 took the feed out of ``rows`` and dropped ``sizes`` (each table's row count, which
every write transaction bumped): both were rows that every write touched, so no two writes
could commit at once. Its migration moves the numbered feed as it was, numbers kept.

Versions: ``VERSION`` is what this treemail writes. A writer creates a missing store and
brings an older one up through ``MIGRATIONS`` (version n to n+1, each in the one transaction
that checks the version, so a failed upgrade changes nothing); a reader never writes, so it
refuses an older store and says how to upgrade it; any version without a way up (one that is
newer, or older than the first migration kept) is refused, never guessed at.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import psycopg
from psycopg import sql

from treemail.adapters.store.postgres_feed import FEED_TABLES
from treemail.adapters.store.postgres_sql import composed
from treemail.core.errors import StorageError, StoreFormatUnknown, StoreMissing

__all__ = ["FEED_SPACE", "LOCK_SPACE", "MIGRATIONS", "VERSION", "lock_key", "settle"]

VERSION = 3

# The tables of trees owned by many daemons (version 2).
_LEASES = (
    "CREATE TABLE {s}.members (holder text PRIMARY KEY, address text NOT NULL, "
    "expires timestamptz NOT NULL)",
    "CREATE TABLE {s}.leases (tree text PRIMARY KEY, holder text NOT NULL, "
    "address text NOT NULL, token bigint NOT NULL, expires timestamptz NOT NULL)",
)

# Version 3: the feed in a table of its own (``postgres_feed``), moved out of ``rows`` with
# its numbers (a feed key is the number's 8 bytes big-endian; a value is the event's key
# and the codec's 4-byte checksum); the row counts dropped.
_OWN_FEED = (
    *FEED_TABLES,
    "INSERT INTO {s}.feed (xid, idx, event, n) SELECT '0'::xid8, n, event, n FROM ("
    "SELECT ('x' || encode(key, 'hex'))::bit(64)::bigint AS n, "
    "substring(value FROM 1 FOR length(value) - 4) AS event FROM {s}.rows "
    "WHERE tbl = 'feed') old",
    "DELETE FROM {s}.rows WHERE tbl = 'feed'",
    "DROP TABLE {s}.sizes",
)

# Version n -> the statements that make it n + 1 ({s} is the schema).
MIGRATIONS: dict[int, Sequence[str]] = {1: _LEASES, 2: _OWN_FEED}

_CREATE = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE {s}.rows (tbl text NOT NULL, key bytea NOT NULL, value bytea NOT NULL, "
    "PRIMARY KEY (tbl, key))",
    *FEED_TABLES,
    "CREATE TABLE {s}.owner (one boolean PRIMARY KEY DEFAULT true CHECK (one), "
    "pid text NOT NULL, holder text NOT NULL)",
    *_LEASES,
)

# The first key of every advisory lock treemail takes, so that ours never meet an
# application's own advisory locks in the same database.
LOCK_SPACE = zlib.crc32(b"treemail") - (1 << 31)


# The first key of the lock that serialises creating or upgrading a store: apart from the
# owner lock, which daemons sharing the store hold shared for as long as they live.
_SETTLE_SPACE = LOCK_SPACE ^ 1
# The first key of the lock that lets one numberer of the feed run at a time
# (``postgres_feed.number``). Write transactions take no lock of the store's: those of
# different trees share no row, and commit at once.
FEED_SPACE = LOCK_SPACE ^ 2


def lock_key(schema: str) -> int:
    """The second key of the advisory locks of the store in ``schema``."""
    return zlib.crc32(schema.encode()) - (1 << 31)


def settle(conn: psycopg.Connection[tuple[object, ...]], schema: str, url: str, *,
           write: bool) -> None:
    """Check the store's version in ``schema``; as a writer, create a missing store or
    upgrade an older one, in one transaction (serialised between openers by a lock)."""
    with conn.transaction():
        if write:  # two writers creating one store at once: the second waits, then sees it
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                         (_SETTLE_SPACE, lock_key(schema)))
        found = conn.execute("SELECT to_regclass(%s)",
                             (sql.Identifier(schema, "meta").as_string(conn),)).fetchone()
        if found is None or found[0] is None:
            if not write:
                raise StoreMissing(f"no store at {url!r} (schema {schema!r} holds none); "
                                   "open it once as a writer to create it", path=url)
            for text in _CREATE:
                conn.execute(composed(schema, text))
            _set_version(conn, schema, VERSION)
            return
        row = conn.execute(composed(schema,
                                    "SELECT value FROM {s}.meta WHERE key = 'version'")).fetchone()
        version = _version(row, url)
        if version == VERSION:
            return
        _refuse_or_upgrade(conn, schema, url, version, write=write)


def _version(row: tuple[object, ...] | None, url: str) -> int:
    text = str(row[0]) if row is not None else ""
    if not text.isdigit():
        raise StoreFormatUnknown(f"the store at {url!r} has no readable schema version "
                                 f"({text!r}); it was not written by treemail, or is damaged: "
                                 "restore it from a copy", path=url, version=text)
    return int(text)


def _refuse_or_upgrade(conn: psycopg.Connection[tuple[object, ...]], schema: str, url: str,
                       version: int, *, write: bool) -> None:
    if version > VERSION:
        raise StoreFormatUnknown(
            f"the store at {url!r} has schema version {version}, newer than this treemail's "
            f"({VERSION}); upgrade treemail to open it", path=url, version=version)
    if any(step not in MIGRATIONS for step in range(version, VERSION)):
        raise StoreFormatUnknown(
            f"the store at {url!r} has schema version {version}, which this treemail can no "
            f"longer upgrade to {VERSION}; upgrade it with the treemail release that "
            "followed it first, or start a new store", path=url, version=version)
    if not write:
        raise StoreFormatUnknown(
            f"the store at {url!r} has schema version {version}, older than this treemail's "
            f"({VERSION}); open it once as a writer (`treemail daemon`, or "
            "`treemail.open_store`) to upgrade it in place", path=url, version=version)
    for step in range(version, VERSION):
        for text in MIGRATIONS[step]:
            conn.execute(composed(schema, text))
    _set_version(conn, schema, VERSION)


def _set_version(conn: psycopg.Connection[tuple[object, ...]], schema: str, version: int) -> None:
    try:
        conn.execute(composed(schema, "INSERT INTO {s}.meta VALUES ('version', %s) ON CONFLICT "
                              "(key) DO UPDATE SET value = EXCLUDED.value"), (str(version),))
    except psycopg.Error as exc:
        raise StorageError(f"cannot mark the store in {url_free(conn)} with its version: "
                           f"{exc}") from exc


def url_free(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """Where ``conn`` is connected, for a message (no password: libpq's info omits it)."""
    info = conn.info
    return f"postgresql database {info.dbname!r} on {info.host!r}"
