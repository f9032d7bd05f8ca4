"""The daemon's hold on its store: the store's ownership (``Store.own``), treemail's only lock.

One process writes a store (or, on PostgreSQL, several daemons share it, each owning its
trees through leases: ``ownership.py``; embedded writers are still refused while they do).
Whoever opens a store as its writer holds it until it closes the
store or dies, however it dies: the embedded store's owner lock is an ``flock`` the kernel
drops with its holder, and a database server drops its lock with the holder's connection, so
a stale holder locks nobody out. The daemon takes nothing else: opening its store *is*
taking the data directory. So

* a second daemon on the same store fails to open it, and is refused with
  ``daemon:data_dir_locked`` naming the first one's pid and socket;
* a daemon started while a program has the store open as its embedded writer is refused the
  same way, naming that program's pid;
* an embedded writer (``treemail.open_store``) on a store a daemon serves gets
  ``store:locked``, naming the daemon's pid and socket, which the daemon records with
  ``Store.own`` once it holds the store. Readers (``treemail log``, ``treemail verify``,
  the TUI's replay) take no lock and work beside any writer.

The daemon opens its store before it touches anything else in the directory, so the lock
also covers its other files: the stale socket it unlinks, the token it may create. On the
way out it unlinks its socket before closing the store, so the socket a next daemon binds
is never removed by the previous one. By default the store is ``DATA_DIR/store``; ``--store
URL`` names another (``treemail.adapters.store.factory``), and the directory then keeps the
socket, the token and the config only.
"""

from __future__ import annotations

from pathlib import Path

from treemail.adapters.daemon.errors import DataDirLocked
from treemail.adapters.store.factory import open_store, shown
from treemail.core.errors import StoreLocked
from treemail.core.store import Store

__all__ = ["DAEMON_ROLE", "hold", "store_of"]

DAEMON_ROLE = "treemail daemon"


def store_of(data_dir: Path, store: str | None = None) -> str:
    """The URL of the store a daemon of ``data_dir`` serves: ``store`` if given, else the
    embedded store in ``DATA_DIR/store``."""
    return store if store is not None else str(data_dir / "store")


def hold(data_dir: Path, socket: Path, store: str | None = None) -> Store:
    """Open the daemon's store (``store``, by default ``DATA_DIR/store``) as its one writer,
    marked as this daemon's (the data directory itself is made private first:
    ``datadir.take``)."""
    try:
        opened = open_store(store_of(data_dir, store), shared=True)
    except StoreLocked as held:
        pid, holder = str(held.details.get("pid")), held.details.get("holder")
        info = holder if isinstance(holder, dict) else {}
        raise DataDirLocked(_refusal(data_dir, pid, info, store), holder=f"pid {pid}", pid=pid,
                            role=info.get("role", "embedded writer"),
                            data_dir=str(data_dir)) from None
    try:
        opened.own({"role": DAEMON_ROLE, "socket": str(socket)})
    except BaseException:
        opened.close()
        raise
    return opened


def _refusal(data_dir: Path, pid: str, holder: dict[str, str], store: str | None) -> str:
    # Named by --store, the store may be another directory's too: name the store then.
    what = f"data directory {data_dir}" if store is None else f"the store {shown(store)}"
    other = "--data-dir" if store is None else "--store"
    if holder.get("role") == DAEMON_ROLE:
        where = ", ".join(f"{k} {v}" for k, v in holder.items() if k != "role")
        return (f"{what} is held by another daemon (pid {pid}, {where}); stop it first, or "
                f"start this one with another {other}")
    return (f"{what} is held by pid {pid}, which has the store open as an embedded writer; "
            f"stop that program first, or start this daemon with another {other}")
