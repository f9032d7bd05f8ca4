"""Durability modes of the LMDB store: what a returned commit survives, and the LMDB flags.

LMDB commits by writing the transaction's new pages (copy-on-write: no live page is ever
overwritten), then the meta page that points at the new root. The modes differ only in which
of those writes are flushed to the disk (``fdatasync``) before the commit returns. Both keep
``writemap`` off (pages are written with ``pwrite`` from private buffers, never through a
writable map; LMDB also needs this for the nested transactions group commit uses), so a bug
that scribbles on memory cannot reach the file, and the meta page is written after the data.

``fsync`` (the default): ``sync=True, metasync=True`` (no MDB_NOSYNC, no MDB_NOMETASYNC).
  Two flushes per commit: the data pages, then the meta page. A commit that returned survives
  a process crash, an OS crash and a power loss (given a disk that honours flushes).

``process``: ``sync=True, metasync=False`` (MDB_NOMETASYNC). One flush per commit: the data
  pages; the meta page reaches the disk with the next commit's flush or the OS's writeback.
  A commit that returned survives a process crash (the kernel holds every write). An OS crash
  or power loss keeps the store intact, but may roll back the last commit: the previous meta
  page still points at a complete, flushed tree. Half the flushes: faster on any disk.

Not offered: ``sync=False`` (MDB_NOSYNC) flushes nothing, and after an OS crash or power loss
the meta page may reach the disk before the data it points at: a corrupt store. That is kept
for tests and benchmarks only (``LmdbStore.open(sync=False)``), never a durability mode.
"""

from __future__ import annotations

import enum

from treemail.core.errors import ConfigError

__all__ = ["Durability", "lmdb_flags"]


class Durability(enum.StrEnum):
    FSYNC = "fsync"
    PROCESS = "process"


def lmdb_flags(durability: Durability | str, sync: bool = True) -> dict[str, bool]:
    """The ``lmdb.open`` flags of a mode; ``sync=False`` (tests only) overrides both."""
    try:
        mode = Durability(durability)
    except ValueError:
        choices = ", ".join(m.value for m in Durability)
        raise ConfigError(f"unknown durability mode {durability!r}; choose one of {choices}",
                          durability=str(durability)) from None
    if not sync:
        return {"sync": False, "metasync": False}
    return {"sync": True, "metasync": mode is Durability.FSYNC}
