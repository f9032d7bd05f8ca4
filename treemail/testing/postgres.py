"""A throwaway PostgreSQL server for a test session: ``initdb`` into a temp dir, ``pg_ctl
start`` on a Unix socket in it (no TCP), ``pg_ctl stop`` and the dir removed afterwards.

Each test gets a store of its own as a schema of the one server (``PostgresCluster.url``
with ``?schema=``), which costs a few milliseconds where a server costs seconds.

``initdb`` refuses to run as root, and CI runs as root: then every server command runs as
the ``postgres`` user (``runuser``), on directories that user owns. The binaries are looked
for in ``TREEMAIL_PG_BIN``, then ``/usr/lib/postgresql/<newest>/bin``, then ``PATH``; when
there are none, ``PostgresMissing`` says what to install: a test that needs the server
fails saying so, it is never skipped.

Speed over durability, as befits a server that dies with the tests: ``fsync=off`` (the
store's commits still go through PostgreSQL's commit; only the flush to the disk is
skipped, which matters for a power loss and for nothing a test does). ``start(durable=True)``
keeps the flushes, for ``just bench``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

__all__ = ["PostgresCluster", "PostgresMissing", "find_binaries"]

_INSTALL = ("PostgreSQL's server binaries (initdb, pg_ctl) were not found: install them "
            "(Debian/Ubuntu: `apt-get install postgresql`), or point TREEMAIL_PG_BIN at "
            "the directory that holds them")


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries on this machine (the message says what to install)."""


def find_binaries() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``; ``PostgresMissing`` if none does."""
    candidates: list[Path] = []
    if env := os.environ.get("TREEMAIL_PG_BIN"):
        candidates.append(Path(env))
    versions = Path("/usr/lib/postgresql")
    if versions.is_dir():
        numbered = [p for p in versions.iterdir() if p.name.isdigit()]
        candidates += [p / "bin" for p in sorted(numbered, key=lambda p: -int(p.name))]
    if found := shutil.which("initdb"):
        candidates.append(Path(found).parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    raise PostgresMissing(_INSTALL)


class PostgresCluster:
    """A running throwaway server. ``start()`` it, hand out ``url(...)``s, ``stop()`` it."""

    def __init__(self, root: Path, binaries: Path, as_user: list[str]) -> None:
        self.root = root
        self.binaries = binaries
        self._as_user = as_user  # the runuser prefix when we are root, else nothing
        self.data = root / "data"
        self.sockets = root / "sockets"
        self.log = root / "server.log"
        self._schemas = itertools.count(1)
        self.running = False

    @classmethod
    def start(cls, *, durable: bool = False) -> PostgresCluster:
        """Start a server; ``durable`` keeps PostgreSQL's flushes (``fsync``, full page
        writes) on, as a production server has them: for benchmarks, never needed by tests."""
        binaries = find_binaries()
        root = Path(tempfile.mkdtemp(prefix="treemail-pg-"))
        as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise PostgresMissing("running as root needs `runuser` to start PostgreSQL "
                                      "as the postgres user (util-linux)")
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresMissing("running as root needs a `postgres` user to run "
                                      "initdb as; " + _INSTALL) from None
            as_user = ["runuser", "-u", "postgres", "--"]
            os.chmod(root, 0o755)  # the server's user must reach its directories
        cluster = cls(root, binaries, as_user)
        for directory in (cluster.data, cluster.sockets):
            directory.mkdir(mode=0o700)
            if as_user:
                os.chown(directory, account.pw_uid, account.pw_gid)
        if as_user:
            cluster.log.touch()
            os.chown(cluster.log, account.pw_uid, account.pw_gid)
        try:
            cluster._run("initdb", "-D", str(cluster.data), "-A", "trust", "-U", "postgres",
                         "--no-sync", "-E", "UTF8", "--locale=C")
            speed = "" if durable else "-c fsync=off -c full_page_writes=off "
            options = (f"-k {cluster.sockets} -c listen_addresses='' {speed}"
                       "-c max_connections=200")
            cluster._run("pg_ctl", "-D", str(cluster.data), "-o", options, "-l",
                         str(cluster.log), "-w", "-t", "60", "start")
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        cluster.running = True
        return cluster

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self._as_user, str(self.binaries / tool), *args],
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}\n"
                               f"{log}")

    def url(self, schema: str | None = None) -> str:
        """A store URL on this server; each call without ``schema`` names a new schema."""
        name = schema if schema is not None else f"s{os.getpid()}_{next(self._schemas)}"
        return (f"postgresql://postgres@/postgres?host={quote(str(self.sockets), safe='')}"
                f"&schema={name}")

    def restart(self) -> None:
        """Stop the server (fast: its connections are cut) and start it again."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w",
                  "-t", "60", "restart")  # -l: the server must not hold our output pipe

    def stop(self) -> None:
        """Stop the server (immediately: nothing in it is kept) and remove its directory."""
        if self.running:
            self.running = False
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
