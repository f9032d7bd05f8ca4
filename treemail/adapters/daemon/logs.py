"""Where the daemon says what it does: stderr, and ``DATA_DIR/daemon.log``.

The library modules only emit records on ``treemail.*`` loggers (a model failure, a give-up,
a repaired file mode); the daemon is the one process that decides where they go. stderr is
for the person who started it; ``daemon.log`` is for whoever looks later, when that terminal
is gone. The log can hold endpoints and the servers' error text, so it is private (0600,
like everything treemail keeps) and capped: it rotates at ``MAX_BYTES`` keeping ``BACKUPS``
older files, so a model failing all night cannot fill the disk.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator
from logging.handlers import RotatingFileHandler
from pathlib import Path

from treemail.adapters.store.private import PRIVATE_FILE

__all__ = ["BACKUPS", "LOG_FILE", "MAX_BYTES", "PrivateLog", "daemon_logging"]

LOG_FILE = "daemon.log"
MAX_BYTES = 1 << 20
BACKUPS = 3
_ROOT = "treemail"


class _Terminal(logging.Formatter):
    """``treemail daemon: ...``, with the level named when it is worth attention."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"treemail daemon: {level}{record.getMessage()}"


class PrivateLog(RotatingFileHandler):
    """A rotating log whose files are created 0600 (never left to the umask) and never
    followed through a symlink someone planted in the data directory."""

    def _open(self) -> io.TextIOWrapper:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.baseFilename, flags, PRIVATE_FILE)
        try:
            os.fchmod(fd, PRIVATE_FILE)  # a file an older run or a copy left readable
            return open(fd, "a", encoding=self.encoding or "utf-8", errors=self.errors)
        except BaseException:
            os.close(fd)
            raise


@contextlib.contextmanager
def daemon_logging() -> Iterator[Callable[[Path], None]]:
    """Send ``treemail.*`` records to stderr now, and to ``DATA_DIR/daemon.log`` once the
    yielded function is called with the data directory (after the daemon holds it, so two
    daemons never write one file). Everything is removed again on exit."""
    logger = logging.getLogger(_ROOT)
    terminal = logging.StreamHandler(sys.stderr)
    terminal.setFormatter(_Terminal())
    handlers: list[logging.Handler] = [terminal]
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(terminal)

    def to_file(data_dir: Path) -> None:
        try:
            file = PrivateLog(data_dir / LOG_FILE, maxBytes=MAX_BYTES, backupCount=BACKUPS,
                              encoding="utf-8")
        except OSError as exc:  # a planted symlink, a full disk: serve on, say it here
            logger.warning("cannot write %s (%s); logging to stderr only",
                           data_dir / LOG_FILE, exc.strerror or exc)
            return
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(file)
        logger.addHandler(file)

    try:
        yield to_file
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(level)
