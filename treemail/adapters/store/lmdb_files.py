"""The files of an LMDB store directory, checked before LMDB maps them, and the owner lock.

LMDB maps ``data.mdb`` and trusts it: a file cut shorter than its header says kills the
process with SIGBUS on the first read past the end, and a 0-byte file is silently taken for a
new store. So every open first reads the two meta pages itself and refuses a file that does
not hold what they describe, with a message instead of a signal.

The owner lock: LMDB's own lock file lets many processes share a store, but treemail's
recovery assumes one owner (it treats every run it did not start as dead). A writer therefore
holds an exclusive ``flock`` on ``owner.lock`` for as long as the store is open, and writes
its pid there so that a second opener can say who holds it (a daemon adds what it is and
where it serves: treemail has one lock, this one; see ``adapters/daemon/host.py``). The
kernel drops the lock when the holder dies, however it dies, so a stale file never locks
anyone out.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path

import attrs

from treemail.core.errors import StoreDamaged, StoreLocked, StoreMissing

__all__ = ["DATA_FILE", "LOCK_FILE", "OWNER_FILE", "Header", "OwnerLock", "check_data_file"]

DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"  # LMDB's reader table
OWNER_FILE = "owner.lock"

_MAGIC = 0xBEEFC0DE
_VERSION = 1
# A meta page: a 16-byte page header, then magic, version, address, map size, the free and
# main database records (48 bytes each; the free one's first field holds the page size),
# the last page used and the transaction id. Little-endian, 64-bit: the builds we run on.
_META = struct.Struct("<16xIIQQI44x48xQQ")
_MIN_PAGE, _MAX_PAGE = 512, 1 << 16


@attrs.frozen
class Header:
    """What the newer of the two meta pages says about ``data.mdb``."""

    page_size: int
    map_size: int
    last_page: int
    txn_id: int

    @property
    def used_bytes(self) -> int:
        return (self.last_page + 1) * self.page_size


def _meta(raw: bytes, offset: int, path: Path) -> Header:
    if len(raw) < offset + _META.size:
        raise _damaged(path, f"it is {len(raw)} bytes, too short for its meta pages")
    magic, version, _, map_size, page_size, last_page, txn_id = _META.unpack_from(raw, offset)
    if magic != _MAGIC or version != _VERSION:
        raise _damaged(path, f"the meta page at byte {offset} is not an LMDB meta page")
    if not (_MIN_PAGE <= page_size <= _MAX_PAGE and page_size & (page_size - 1) == 0):
        raise _damaged(path, f"the meta page at byte {offset} gives page size {page_size}")
    return Header(page_size, map_size, last_page, txn_id)


def check_data_file(directory: Path) -> Header:
    """The header of ``directory/data.mdb`` once the file is shown to hold every page its
    meta pages describe; ``StoreDamaged`` (never a signal) if it does not."""
    path = directory / DATA_FILE
    try:
        with path.open("rb") as file:
            first = file.read(_MAX_PAGE + _META.size)
            size = os.fstat(file.fileno()).st_size
    except FileNotFoundError:
        raise StoreMissing(f"no store at {str(directory)!r} (no {DATA_FILE} in it)",
                           path=str(directory)) from None
    except OSError as exc:
        raise _damaged(path, f"it cannot be read: {exc}") from exc
    if size == 0:
        raise _damaged(path, "it is empty (0 bytes), so it holds no store")
    head = _meta(first, 0, path)
    other = _meta(first, head.page_size, path)
    if other.page_size != head.page_size:
        raise _damaged(path, "its two meta pages disagree on the page size")
    newer = max(head, other, key=lambda h: h.txn_id)
    needed = max(head.used_bytes, other.used_bytes)
    if size < needed:
        raise _damaged(path, f"it is {size} bytes but its header describes {needed}: "
                       "the file was truncated")
    return newer


def _damaged(path: Path, why: str) -> StoreDamaged:
    return StoreDamaged(f"the store file {str(path)!r} is damaged: {why}. Restore the store "
                        "from a copy; treemail will not open it as an empty store.",
                        path=str(path))


class OwnerLock:
    """An exclusive, non-blocking ``flock`` on ``directory/owner.lock`` holding our pid, and
    optionally what we are (``describe``: a daemon writes its role and socket there)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / OWNER_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)  # private.py
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid, holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise StoreLocked(
                f"the store at {str(directory)!r} is in use by {_who(pid, holder)}; "
                "stop it first, or open the store read-only to look at it",
                path=str(directory), pid=pid, holder=holder) from None
        self._fd: int | None = fd
        self.describe({})

    def describe(self, holder: Mapping[str, str]) -> None:
        """Record our pid and ``holder`` (what a refused opener is told about us)."""
        if self._fd is not None:
            text = f"{os.getpid()}\n" + (json.dumps(dict(holder)) + "\n" if holder else "")
            os.pwrite(self._fd, text.encode(), 0)  # then cut: a reader never sees it empty
            os.ftruncate(self._fd, len(text.encode()))

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor drops the flock


def _who(pid: str, holder: Mapping[str, str]) -> str:
    role = holder.get("role", "another process")
    where = ", ".join(f"{k} {v}" for k, v in holder.items() if k != "role")
    return f"{role} (pid {pid}{', ' + where if where else ''})"


def _holder(fd: int) -> tuple[str, dict[str, str]]:
    try:
        lines = os.pread(fd, 4096, 0).decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    pid = lines[0].strip() if lines and lines[0].strip().isdigit() else "unknown"
    try:
        info = json.loads(lines[1]) if len(lines) > 1 else {}
    except ValueError:
        info = {}
    holder = {str(k): str(v) for k, v in info.items()} if isinstance(info, dict) else {}
    return pid, holder
