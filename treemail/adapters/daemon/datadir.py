"""Taking a data directory: made private, held by its store's lock, kept out of git.

What the daemon keeps in ``DATA_DIR`` (spec/protocol.md, "Files the daemon keeps"):

* ``store/``: the embedded store and its owner lock, the one lock (``lock.py``);
* ``daemon.sock`` (the default socket), ``daemon.token`` (after a ``--tcp`` start),
  ``daemon.log`` (what it did, rotated; ``logs.py``);
* ``registered-agents/``: agent docs defined over the wire (``registered.py``);
* ``.gitignore``, holding ``*``, written into a new data directory: a data directory made
  inside a checkout (``./.treemail``, the default) is never committed by accident;
* the user's own ``config.toml`` and ``agents/``, which the daemon reads and never writes.

Everything the daemon creates is private (directories 0700, files 0600, the socket 0600),
whatever the umask; a data directory or store found open to others is repaired if it is
this user's and treemail's, and refused otherwise (``store/private.py`` says which and why).
The data directory's own mode is what protects the user's files in it.
"""

from __future__ import annotations

import os
from pathlib import Path

from treemail.adapters.daemon.lock import hold
from treemail.adapters.daemon.registered import REGISTERED_DIR
from treemail.adapters.daemon.tcp import TOKEN_FILE
from treemail.adapters.store.private import PRIVATE_FILE, private_dir
from treemail.core.store import Store

__all__ = ["GITIGNORE", "STORE_DIR", "take"]

STORE_DIR = "store"
GITIGNORE = ".gitignore"
# What makes a directory a treemail data directory (a user may write config.toml or
# agents/ before the first start): one of them, and a mode open to others is repaired.
_OURS = (STORE_DIR, REGISTERED_DIR, TOKEN_FILE, "config.toml", "agents", "daemon.sock",
         "daemon.log")


def take(data_dir: Path, socket: Path, store_url: str | None = None) -> Store:
    """Make (or check) ``data_dir`` private, then hold it (``lock.py``) through its store
    (``store_url``, by default ``DATA_DIR/store``); a new one is also marked ignored by git,
    once it is held."""
    new = private_dir(data_dir, markers=_OURS)
    store = hold(data_dir, socket, store_url)
    if new:
        try:
            _ignore_in_git(data_dir)
        except BaseException:
            store.close()
            raise
    return store


def _ignore_in_git(data_dir: Path) -> None:
    try:
        fd = os.open(data_dir / GITIGNORE,
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     PRIVATE_FILE)
    except FileExistsError:
        return  # the user's own: kept as it is
    try:
        os.fchmod(fd, PRIVATE_FILE)  # whatever the umask
        os.write(fd, b"*\n")
    finally:
        os.close(fd)
