"""The SQL of a ``PostgresStore``: one composer for every statement naming the store's schema,
and the rows table's statements (``Queries``), composed once when the store opens.

A store lives in a schema of its own (``?schema=NAME``), so each statement names its tables
as ``{s}.rows``, ``{s}.feed`` and so on, and ``{s}`` is filled in here, quoted as an
identifier (a schema name is the URL's: it may hold any character but NUL). Composed once
to plain text against an open connection (``composer``), a statement then costs nothing
to send again: the store's hot path never composes. The feed's statements are
``postgres_feed``'s, composed by the same composer (``FeedQueries.of``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import psycopg
from psycopg import sql

from treemail.adapters.store.postgres_feed import FeedQueries

__all__ = ["Compose", "Queries", "composed", "composer"]

# A statement's text with ``{s}`` for the schema, to the text sent.
Compose = Callable[[str], str]


def composed(schema: str, text: str) -> sql.Composed:
    """``text`` with ``{s}`` naming ``schema`` (quoted), for a connection to render."""
    return sql.SQL(text).format(s=sql.Identifier(schema))


def composer(schema: str, conn: psycopg.Connection[Any]) -> Compose:
    """Statements of ``schema`` rendered to text once, with ``conn``'s quoting rules."""

    def q(text: str) -> str:
        return composed(schema, text).as_string(conn)

    return q


@attrs.frozen
class Queries:
    """The statements of one store's schema, composed once when the store opens."""

    get: str
    get_many: str
    upsert: str
    update: str
    insert: str
    delete: str
    scan_from: str
    scan_range: str
    size: str
    all_rows: str
    feed: FeedQueries

    @classmethod
    def of(cls, schema: str, conn: psycopg.Connection[Any]) -> Queries:
        q = composer(schema, conn)
        return cls(
            get=q("SELECT value FROM {s}.rows WHERE tbl = %s AND key = %s"),
            get_many=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key = ANY(%s)"),
            upsert=q("INSERT INTO {s}.rows VALUES (%s, %s, %s) ON CONFLICT (tbl, key) "
                     "DO UPDATE SET value = EXCLUDED.value"),
            update=q("UPDATE {s}.rows SET value = %s WHERE tbl = %s AND key = %s"),
            insert=q("INSERT INTO {s}.rows VALUES (%s, %s, %s)"),
            delete=q("DELETE FROM {s}.rows WHERE tbl = %s AND key = %s"),
            scan_from=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key >= %s "
                        "ORDER BY key"),
            scan_range=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key >= %s "
                         "AND key < %s ORDER BY key"),
            size=q("SELECT count(*) FROM {s}.rows WHERE tbl = %s"),
            all_rows=q("SELECT key, value FROM {s}.rows WHERE tbl = %s ORDER BY key"),
            feed=FeedQueries.of(q),
        )
