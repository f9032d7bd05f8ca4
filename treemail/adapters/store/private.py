"""Directories and files only their user can read: how treemail keeps what it writes.

A store holds every message body, delegated task and model output, so whatever treemail
creates to keep it (a data directory, a store directory, the store's files, the agent docs a
daemon registers) is private to the user who runs it: directories 0700, files 0600. Modes are
set explicitly, never left to the process umask: a umask of 022 would make them readable by
every local user.

A path found readable (or writable) by others when it is opened:

* owned by this user, and treemail's (a directory that is empty or holds what treemail keeps
  there, or a file of such a directory): *repaired*. Its mode is what a umask, an older
  treemail or a copy left; the user who owns it is the user treemail acts for, so making it
  private takes nothing from anyone. The repair is said on stderr (a ``treemail`` logger
  warning), since the data may have been read already;
* owned by another user: *refused* (``StoreNotPrivate``). treemail will neither change the
  mode of another user's file nor write its store into their directory; the message names
  the path and the ``chown``/``chmod`` that would make it this user's;
* a non-empty directory that is not treemail's (a ``--data-dir`` pointing at ``$HOME`` or
  ``/tmp`` by mistake): *refused* too, naming the ``chmod`` to run if it is meant.

A file system whose modes cannot be changed (a chmod that fails or does not take) is refused
the same way: such a store cannot be made private.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
from collections.abc import Collection
from pathlib import Path

from treemail.core.errors import StorageError, StoreNotPrivate

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "private_dir", "private_files"]

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_OTHERS = 0o077  # group and other: any of these bits lets another local user in

_log = logging.getLogger("treemail")


def private_dir(path: Path, *, markers: Collection[str] | None,
                uid: int | None = None) -> bool:
    """Make ``path`` a private directory: create it (and each missing parent) 0700, or check
    an existing one, repairing it if it is empty or holds one of ``markers`` (what treemail
    keeps there; None: a directory only treemail makes), refusing it otherwise. True if it
    is new: created now, or found empty."""
    uid = os.getuid() if uid is None else uid
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):  # parents first: each one ours, and 0700
        try:
            os.mkdir(directory, PRIVATE_DIR)
        except FileExistsError:
            continue  # made by another opener meanwhile: it is checked below like any other
        except OSError as exc:
            raise StorageError(f"cannot create {str(directory)!r}: {exc.strerror or exc}",
                               path=str(directory)) from exc
        _chmod(directory, PRIVATE_DIR)  # the umask may have taken owner bits too
    try:
        empty = not any(path.iterdir())
    except NotADirectoryError:
        raise StorageError(f"{str(path)!r} is not a directory; give treemail a directory "
                           "path", path=str(path)) from None
    except OSError as exc:
        raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}",
                           path=str(path)) from exc
    ours = empty or markers is None or any((path / name).exists() for name in markers)
    _settle(path, uid, ours=ours)
    return empty


def private_files(directory: Path, *, uid: int | None = None) -> None:
    """Check (and repair, or refuse) every regular file of ``directory``: in a directory
    treemail keeps, every file is treemail's."""
    uid = os.getuid() if uid is None else uid
    for path in sorted(directory.iterdir()):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue  # gone meanwhile: nothing left to protect
        if stat.S_ISREG(mode):  # a socket or link is not a kept file; the link's target is
            _settle(path, uid, ours=True)  # the user's own business


def _settle(path: Path, uid: int, *, ours: bool) -> None:
    info = os.stat(path)
    if info.st_uid != uid:
        raise StoreNotPrivate(
            f"{str(path)!r} belongs to uid {info.st_uid}, not to this user (uid {uid}), and "
            f"treemail keeps its files private to the user who runs it: run treemail as uid "
            f"{info.st_uid}, or make the files yours: chown -R {uid} {_quote(path)} && "
            f"chmod -R go-rwx {_quote(path)}", path=str(path), owner=info.st_uid, uid=uid)
    mode = stat.S_IMODE(info.st_mode)
    if not mode & _OTHERS:
        return
    if not ours:
        raise StoreNotPrivate(
            f"{str(path)!r} is open to other users (mode {mode:04o}) and holds files that "
            f"are not treemail's, so treemail will not change its mode: run chmod 700 "
            f"{_quote(path)} if it should be private, or choose another directory",
            path=str(path), mode=f"{mode:04o}")
    _chmod(path, mode & ~_OTHERS)  # 0755 -> 0700, 0644 -> 0600: the owner's bits stay
    _log.warning("treemail: %s was open to other users (mode %04o); made it %04o",
                 path, mode, stat.S_IMODE(os.stat(path).st_mode))


def _chmod(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
        took = stat.S_IMODE(os.stat(path).st_mode) & _OTHERS == mode & _OTHERS
    except OSError as exc:
        took, why = False, exc.strerror or str(exc)
    else:
        why = "the file system keeps its own modes"
    if not took:
        raise StoreNotPrivate(
            f"cannot make {str(path)!r} private ({why}): run chmod {mode:o} {_quote(path)}, "
            "or keep the store on a file system with Unix permissions", path=str(path))


def _quote(path: Path) -> str:
    return shlex.quote(str(path))
