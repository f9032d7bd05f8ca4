"""The URL of a ``PostgresStore``: libpq's own, plus treemail's parameters.

``postgresql://USER@HOST/DB?schema=NAME&writers=N``: libpq reads the URL (host, database,
credentials, ``sslmode`` and the rest), but not ``schema`` (the PostgreSQL schema that holds
the store, ``DEFAULT_SCHEMA`` if not given) nor ``writers`` (how many write connections a
store shared by daemons keeps, ``WRITERS`` if not given), which are taken out before the URL
reaches it. A bad value is refused with ``store:url_unknown`` naming the form it takes. A
URL shown in a message or an error never shows its password (``shown``).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from treemail.adapters.store.errors import StoreUrlUnknown

__all__ = ["DEFAULT_SCHEMA", "WRITERS", "shown", "split_url", "url_writers"]

DEFAULT_SCHEMA = "treemail"
# Write connections of a store shared by daemons, unless the URL says ``?writers=N``: the
# transactions of that many trees at once, each lane a thread of the runtime's writer. One,
# because on two cores more lanes measured slower (``just bench --only n``: one daemon's
# acks/s 2.3x higher with one lane than with four; the lanes' threads share one interpreter,
# which the server's own work already has to share the cores with). More pay where the
# server has cores of its own.
WRITERS = 1
_MAX_WRITERS = 64


def split_url(url: str) -> tuple[str, str]:
    """The libpq URL without treemail's own parameters (``schema``, ``writers``), and the
    schema."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for name, value in query if name == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not schema or len(schema.encode()) > 63 or "\x00" in schema:
        raise StoreUrlUnknown(f"cannot open a store at {shown(url)!r}: schema must be 1 to 63 "
                              "bytes, without NUL", url=shown(url), forms=["?schema=NAME"])
    rest = urlencode([(name, value) for name, value in query
                      if name not in ("schema", "writers")])
    return urlunsplit(parts._replace(query=rest)), schema


def url_writers(url: str) -> int:
    """The write connections the URL asks for (``?writers=N``, 1 to 64), else ``WRITERS``."""
    given = [value for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True)
             if name == "writers"]
    if not given:
        return WRITERS
    if not given[-1].isdecimal() or not 1 <= int(given[-1]) <= _MAX_WRITERS:
        raise StoreUrlUnknown(f"cannot open a store at {shown(url)!r}: writers must be a "
                              f"number from 1 to {_MAX_WRITERS}, not {given[-1]!r}",
                              url=shown(url), forms=["?writers=N"])
    return int(given[-1])


def shown(url: str) -> str:
    """``url`` without its password, for messages and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
