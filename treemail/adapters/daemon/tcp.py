"""The optional TCP listener: loopback only, and every connection presents a bearer token.

A Unix socket is guarded by its file mode; a TCP port on loopback is open to every process
of every user on the machine (and to a web page that makes the browser send to it), so it
needs a secret. The token:

* is made on the first ``treemail daemon --tcp`` (32 random bytes, URL-safe text) and kept in
  ``DATA_DIR/daemon.token``, created with mode 0600; later starts reuse it, so clients keep
  working across restarts. Delete the file to rotate it (the next start makes a new one).
* is refused if that file is readable or writable by anyone but its owner, or owned by
  another user: the daemon will not serve a secret others may have read.
* is presented in the ``initialize`` params, ``auth_token``. On TCP the first frame must be
  that ``initialize``; anything else, a missing or wrong token, or no ``initialize`` within
  ``AUTH_TIMEOUT`` seconds, is answered ``rpc:unauthorized`` (-32004) and the connection is
  closed, so a peer cannot probe the protocol before it proves it holds the token. The
  comparison takes the same time whatever the presented text.

Clients find the token in ``TREEMAIL_TOKEN`` or in the file (``--token-file``, by default
``DATA_DIR/daemon.token``); never on a command line, where other users could read it.
``--tcp`` refuses any address that does not resolve to loopback only.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import stat
from pathlib import Path

from treemail.core.errors import NotLoopback, TokenFileUnsafe, Unauthorized

__all__ = ["AUTH_TIMEOUT", "TOKEN_FILE", "Token", "loopback", "parse_address", "refusal"]

TOKEN_FILE = "daemon.token"
AUTH_TIMEOUT = 10.0


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) into its parts; ValueError says what is wrong."""
    host, sep, port = text.strip().removeprefix("tcp://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:7777)")
    return host, int(port)


def loopback(host: str, port: int) -> str:
    """``host`` itself when every address it resolves to is a loopback address; otherwise
    ``NotLoopback``, before anything is bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NotLoopback(f"--tcp {host}: the name does not resolve ({exc.strerror}); use "
                          "127.0.0.1 or ::1", host=host) from None
    found = {str(info[4][0]) for info in infos}
    outside = sorted(a for a in found if not ipaddress.ip_address(a.split("%")[0]).is_loopback)
    if outside:
        raise NotLoopback(
            f"--tcp {host} would listen on {', '.join(outside)}, which is not loopback; the "
            "TCP listener only binds 127.0.0.1, ::1 or localhost (for remote access, tunnel "
            "to it, for example over ssh)", host=host, addresses=outside)
    return host


class Token:
    """The bearer token of a data directory's TCP listener."""

    def __init__(self, secret: str) -> None:
        self._secret = secret.encode()

    @classmethod
    def load_or_create(cls, data_dir: Path) -> Token:
        path = data_dir / TOKEN_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            return cls(_read_private(path))
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return cls(_read_private(path))

    def admits(self, presented: object) -> bool:
        """Whether ``presented`` is the token, compared in constant time."""
        offered = presented.encode() if isinstance(presented, str) else b""
        return hmac.compare_digest(offered, self._secret)


def refusal(why: str) -> Unauthorized:
    return Unauthorized(f"{why}; a TCP connection must first send initialize with "
                        f"auth_token set to the daemon's token (DATA_DIR/{TOKEN_FILE}, "
                        "or TREEMAIL_TOKEN); the connection is closed")


def _read_private(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TokenFileUnsafe(f"{path}: cannot open the token file ({exc.strerror}); delete "
                              "it and start the daemon again to make a new one",
                              path=str(path)) from None
    with os.fdopen(fd, encoding="ascii", errors="replace") as file:
        info = os.fstat(file.fileno())
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or stat.S_IMODE(info.st_mode) & 0o077):
            raise TokenFileUnsafe(
                f"{path}: the token file must be a regular file of yours with mode 0600 (it "
                f"is {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}); others may "
                "have read it: delete it and restart the daemon to make a new token",
                path=str(path))
        secret = file.read().strip()
    if len(secret) < 32:
        raise TokenFileUnsafe(f"{path}: the token is empty or too short; delete the file and "
                              "restart the daemon to make a new one", path=str(path))
    return secret
