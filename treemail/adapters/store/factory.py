"""Stores chosen by URL: the one place that maps a store's address onto a backend.

Everything above the store wing (the engine's facade, the daemon, the command line, the TUI,
the demo) names a store by a string and opens it here; none of it names a backend or a file
of one (``tests/unit/test_store_choice.py`` holds that). The forms:

* a path, or ``lmdb:PATH``: the embedded LMDB store in that directory (the default, created
  on first open);
* ``memory:``: a store in this process's memory, gone when it closes (tests, trials);
* ``postgresql://...`` (or ``postgres://``): a PostgreSQL database, in libpq's URL form;
  ``?schema=NAME`` picks the schema that holds the store (default ``treemail``), so several
  stores can share one database.

A string is a path unless it starts with a scheme (letters, digits, ``+ - .`` before the
first ``:`` and no ``/`` before it), so ``./a:b`` is a path while ``a:b`` is an unknown scheme,
refused with ``store:unknown_url`` rather than silently made into a directory named ``a:b``.
"""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path

import attrs

from treemail.adapters.store.errors import StoreDriverMissing, StoreUrlUnknown
from treemail.core.memory_store import MemoryStore
from treemail.core.store import Store

__all__ = ["FORMS", "Kind", "StoreUrl", "holds_store", "open_store", "parse", "shown"]

FORMS = ("PATH", "lmdb:PATH", "memory:", "postgresql://[USER@]HOST[:PORT]/DB[?schema=NAME]")

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


class Kind(enum.StrEnum):
    LMDB = "lmdb"
    MEMORY = "memory"
    POSTGRESQL = "postgresql"


@attrs.frozen
class StoreUrl:
    """A parsed store address: the backend, and where its store is (a directory for LMDB,
    the libpq URL for PostgreSQL, nothing for memory)."""

    kind: Kind
    location: str


def parse(url: str | os.PathLike[str]) -> StoreUrl:
    """The backend and location ``url`` names; ``StoreUrlUnknown`` listing the accepted forms
    when it names none."""
    if not isinstance(url, str):
        return StoreUrl(Kind.LMDB, os.fspath(url))
    scheme = _SCHEME.match(url)
    if scheme is None:
        if not url:
            raise _unknown(url, "it is empty")
        return StoreUrl(Kind.LMDB, url)
    name, rest = scheme.group(1).lower(), url[scheme.end():]
    if name == "lmdb":
        if not rest:
            raise _unknown(url, "lmdb: needs the store's directory after the colon")
        return StoreUrl(Kind.LMDB, rest)
    if name == "memory":
        if rest:
            raise _unknown(url, "memory: takes nothing after the colon")
        return StoreUrl(Kind.MEMORY, "")
    if name in ("postgresql", "postgres"):
        return StoreUrl(Kind.POSTGRESQL, url)
    raise _unknown(url, f"{name!r} is not a store scheme treemail knows")


def _unknown(url: str, why: str) -> StoreUrlUnknown:
    return StoreUrlUnknown(
        f"cannot open a store at {url!r}: {why}. Give one of {', '.join(FORMS)} "
        "(write ./NAME for a directory whose name holds a colon)", url=url, forms=list(FORMS))


def open_store(url: str | os.PathLike[str], *, readonly: bool = False, sync: bool = True,
               durability: str = "fsync", shared: bool = False) -> Store:
    """Open the store ``url`` names. As a writer (the default) it is created if missing and
    held as its one writer (``Store.own``); ``readonly=True`` takes no hold, writes nothing
    and refuses a missing store with ``store:missing``. ``durability`` is ``fsync`` (a
    commit survives power loss) or ``process`` (a process crash); ``sync=False`` is for
    tests and benchmarks only. ``shared`` (a daemon's open) lets a store several processes
    can write (PostgreSQL) be served by many daemons at once, each owning its trees through
    leases (``leases.py``); a store one process holds whole ignores it."""
    where = parse(url)
    if where.kind is Kind.MEMORY:
        return MemoryStore()
    if where.kind is Kind.POSTGRESQL:
        try:
            from treemail.adapters.store.postgres_store import PostgresStore
        except ImportError as exc:  # psycopg is an extra: treemail[postgres]
            raise StoreDriverMissing(
                f"a postgresql:// store needs psycopg ({exc}); install treemail[postgres] "
                "(pip install 'treemail[postgres]')", driver="psycopg") from None
        return PostgresStore.open(where.location, readonly=readonly, sync=sync,
                                  durability=durability, shared=shared)
    from treemail.adapters.store.lmdb_store import LmdbStore

    return LmdbStore.open(where.location, readonly=readonly, sync=sync, durability=durability)


def holds_store(url: str | os.PathLike[str]) -> bool:
    """Whether ``url`` names a store that exists, answered without opening it where that is
    cheap (a directory is looked at; a server is asked only when opened)."""
    where = parse(url)
    if where.kind is Kind.LMDB:
        from treemail.adapters.store.lmdb_files import DATA_FILE

        return (Path(where.location) / DATA_FILE).exists()
    return where.kind is Kind.POSTGRESQL


def shown(url: str) -> str:
    """``url`` as a message may show it: a server URL's password masked."""
    from urllib.parse import urlsplit, urlunsplit

    if parse(url).kind is not Kind.POSTGRESQL:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@",
                                                                 ":***@", 1)))
