"""The daemon's hold on its data directory: an exclusive flock on ``daemon.lock``.

The lock file names its holder (pid and socket), so a second daemon's refusal can say who
has the directory. The kernel drops the lock when the holder dies, even by kill -9: a stale
file left behind is overwritten by the next daemon, never trusted.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from treemail.core.errors import DataDirLocked

__all__ = ["DataDirLock", "DataDirLocked"]


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "daemon.lock"
        self._fd: int | None = None

    def acquire(self, socket: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DataDirLocked(
                f"data directory {self.path.parent} is held by another daemon ({holder}); "
                "stop it first, or start this one with another --data-dir",
                holder=holder, data_dir=str(self.path.parent)) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "socket": socket}).encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "holder unknown"
    return f"pid {info['pid']}, socket {info.get('socket')}"
