"""The daemon's hold on its data directory: the store's owner lock, treemail's only lock.

One process writes a store: whoever opens ``DATA_DIR/store`` as its writer holds an
exclusive ``flock`` on ``store/owner.lock`` (``lmdb_files.OwnerLock``) until it closes the
store or dies, however it dies (the kernel drops the lock; a stale file locks nobody out).
The daemon takes nothing else: opening the store *is* taking the data directory. So

* a second daemon on the directory fails to open the store, and is refused with
  ``daemon:data_dir_locked`` naming the first one's pid and socket;
* a daemon started while a program has the store open as its embedded writer is refused the
  same way, naming that program's pid;
* an embedded writer (``LmdbStore.open``) on a store a daemon serves gets ``store:locked``,
  naming the daemon's pid and socket, which the daemon writes into the lock file once it
  holds it. Readers (``readonly=True``, ``treemail log``, ``treemail verify``) take no lock
  and work beside any writer.

The daemon opens the store before it touches anything else in the directory, so the lock
also covers its other files: the stale socket it unlinks, the token it may create. On the
way out it unlinks its socket before closing the store, so the socket a next daemon binds
is never removed by the previous one.
"""

from __future__ import annotations

from pathlib import Path

from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import DataDirLocked, StoreLocked

__all__ = ["DAEMON_ROLE", "hold"]

DAEMON_ROLE = "treemail daemon"


def hold(data_dir: Path, socket: Path) -> LmdbStore:
    """Open the data directory's store as its one writer, marked as this daemon's (the
    directory itself is made private first: ``datadir.take``)."""
    try:
        store = LmdbStore.open(str(data_dir / "store"))
    except StoreLocked as held:
        pid, holder = str(held.details.get("pid")), held.details.get("holder")
        info = holder if isinstance(holder, dict) else {}
        raise DataDirLocked(_refusal(data_dir, pid, info), holder=f"pid {pid}", pid=pid,
                            role=info.get("role", "embedded writer"),
                            data_dir=str(data_dir)) from None
    store.describe_owner({"role": DAEMON_ROLE, "socket": str(socket)})
    return store


def _refusal(data_dir: Path, pid: str, holder: dict[str, str]) -> str:
    if holder.get("role") == DAEMON_ROLE:
        where = ", ".join(f"{k} {v}" for k, v in holder.items() if k != "role")
        return (f"data directory {data_dir} is held by another daemon (pid {pid}, {where}); "
                "stop it first, or start this one with another --data-dir")
    return (f"data directory {data_dir} is held by pid {pid}, which has its store open as "
            "an embedded writer; stop that program first, or start this daemon with "
            "another --data-dir")
