"""The daemon's listening sockets: binding them, taking connections off them, giving back.

Why not ``asyncio.start_server``: its accept loop, out of file descriptors (EMFILE), logs a
traceback for every one of up to 100 tries per wake-up and schedules as many restarts, so a
peer that fills the descriptor table fills stderr too (hundreds of tracebacks a second). Here
one task accepts: a failure starts a *burst*, logged once; each try is retried after a pause
that doubles up to a second, and the burst ends, logged once more, when no try has failed
for ``QUIET`` seconds (a table that fills again as soon as it empties is one burst, not a
line per connection). The daemon's other connections are served all along, and as they
close it accepts again.

The Unix socket's path is the user's to name (``--socket``), so binding is careful:

* a path that holds something other than a socket is refused (``daemon:socket_path_taken``)
  and left as it is: ``--socket notes.txt`` never deletes notes.txt;
* a socket that something answers on is refused (``daemon:socket_in_use``): another daemon,
  of another data directory, serves it;
* a socket nothing answers on is stale (a daemon that died) and is replaced;
* at the end the daemon unlinks the path only if it still names the socket it bound (the
  same device and inode), never a socket or file that took its place since.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import attrs

from treemail.adapters.daemon.errors import SocketInUse, SocketPathTaken

__all__ = ["BACKLOG", "QUIET", "Listener", "UnixSocket", "bind_tcp", "bind_unix",
           "check_socket_path"]

BACKLOG = 128
QUIET = 5.0
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 1.0


def _log(line: str) -> None:
    with contextlib.suppress(OSError):  # stderr may be a pipe nobody reads any more
        print(f"treemail daemon: {line}", file=sys.stderr, flush=True)


class Listener:
    """One listening socket and the task that accepts from it; ``accepted`` gets each new
    connection's socket (non-blocking) and owns it from then on."""

    def __init__(self, sock: socket.socket, accepted: Callable[[socket.socket], None],
                 where: str) -> None:
        self.sock = sock
        self.where = where
        self._accepted = accepted
        self._failures = 0  # in this burst
        self._streak = 0  # failures since the last accept: the pause grows with it
        self._last_failure = 0.0
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name=f"accept {where}")

    def close(self) -> None:
        """Stop accepting; the socket closes as the task ends."""
        self._task.cancel()

    async def _run(self) -> None:
        try:
            while True:
                try:
                    conn, _ = await self._loop.sock_accept(self.sock)
                except ConnectionAbortedError:
                    continue  # the peer gave up before it was taken: nothing to do
                except OSError as exc:
                    await asyncio.sleep(self._failed(exc))
                    continue
                self._streak = 0
                conn.setblocking(False)
                self._accepted(conn)
        finally:
            self.sock.close()

    def _failed(self, exc: OSError) -> float:
        """Log the first failure of a burst; the pause before the next try."""
        if self._failures == 0:
            hint = (" (out of file descriptors: connections close, then it accepts again)"
                    if exc.errno in (errno.EMFILE, errno.ENFILE) else "")
            _log(f"cannot accept connections on {self.where}: {exc.strerror or exc}{hint}; "
                 "retrying, and quiet until it works again")
            self._loop.call_later(QUIET, self._end_burst)
        self._failures += 1
        self._streak += 1
        self._last_failure = self._loop.time()
        return float(min(_LONGEST_PAUSE, _FIRST_PAUSE * 2 ** min(self._streak - 1, 8)))

    def _end_burst(self) -> None:
        quiet = self._loop.time() - self._last_failure
        if quiet < QUIET:  # it failed again since: look again once it may have been quiet
            self._loop.call_later(QUIET - quiet, self._end_burst)
            return
        if not self._task.done():
            _log(f"accepting connections on {self.where} again, after {self._failures} "
                 "failed tries")
        self._failures = 0


def bind_tcp(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address ``host`` resolves to (the caller checked that they
    are loopback); port 0 picks one port, the same for each address."""
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # ::1 alone, not the IPv4 side too
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


@attrs.frozen
class UnixSocket:
    """A bound Unix socket, and the identity of the file it made."""

    sock: socket.socket
    path: Path
    device: int
    inode: int

    def release(self) -> None:
        """Unlink the path if it still names this socket's file, and nothing else."""
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) == (self.device, self.inode):
                self.path.unlink()


def check_socket_path(path: Path) -> bool:
    """Refuse a path that holds something other than a socket; whether it holds a socket."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketPathTaken(
            f"--socket {path}: there is already a file there that is not a socket; it was "
            "left as it is: name a path that does not exist (or a stale treemail socket)",
            path=str(path))
    return True


def _clear_stale(path: Path) -> None:
    """Unlink a socket nothing answers on; refuse one that something answers on."""
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            pass  # nothing listens: a daemon died and left it; it is ours to replace
        except OSError as exc:  # a full backlog, a socket of another user: not ours
            raise SocketInUse(_in_use(path, exc.strerror or str(exc)), path=str(path)) from None
        else:
            raise SocketInUse(_in_use(path, "something answers on it"), path=str(path))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def bind_unix(path: Path) -> UnixSocket:
    """A listening Unix socket only its user can open: made under umask 0177, then chmod
    0600, so there is no moment at which another user could connect."""
    if check_socket_path(path):
        _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(str(path))  # EADDRINUSE if another daemon bound it since the check
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        info = os.lstat(path)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return UnixSocket(sock, path, info.st_dev, info.st_ino)


def _in_use(path: Path, why: str) -> str:
    return (f"--socket {path}: another daemon serves this socket ({why}); stop it, or give "
            "this daemon another --socket")
