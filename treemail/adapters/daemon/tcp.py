"""The optional TCP listener: loopback only, and every connection proves it holds a token.

A Unix socket is guarded by its file mode; a TCP port on loopback is open to every process
of every user on the machine (and to a web page that makes the browser send to it), so it
needs a secret. The token:

* is made on the first ``treemail daemon --tcp`` (32 random bytes, URL-safe text) and kept in
  ``DATA_DIR/daemon.token``, created with mode 0600; later starts reuse it, so clients keep
  working across restarts. Delete the file to rotate it (the next start makes a new one).
* is refused if that file is readable or writable by anyone but its owner, or owned by
  another user: the daemon will not serve a secret others may have read.
* never crosses the wire. Whoever listens on the port (another user who bound it while the
  daemon was down, say) would collect a token sent to it, so each side proves it holds the
  token with an HMAC over both sides' fresh nonces, the server first (``handshake.py``;
  spec/protocol.md, section 2). A client checks the server's proof before it sends its own.

Clients find the token in ``TREEMAIL_TOKEN`` or in the file (``--token-file``, by default
``DATA_DIR/daemon.token``); never on a command line, where other users could read it.
``--tcp`` refuses any address that does not resolve to loopback only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat
from pathlib import Path

from treemail.adapters.daemon.errors import NotLoopback, TokenFileUnsafe
from treemail.protocol.rpc_errors import Unauthorized

__all__ = ["AUTH_BYTES", "AUTH_TIMEOUT", "MAX_UNAUTHENTICATED", "NONCE_BYTES", "TOKEN_FILE",
           "Token", "loopback", "parse_address", "refusal"]

TOKEN_FILE = "daemon.token"
# Before it has proved itself a peer is a stranger: it gets a few seconds, a few KiB and one
# of a few places (spec/protocol.md, "Before authentication"). An honest handshake is two
# frames of about 120 bytes and two round trips on loopback.
AUTH_TIMEOUT = 5.0
AUTH_BYTES = 4096
MAX_UNAUTHENTICATED = 32
NONCE_BYTES = 32
# The two directions' proofs are keyed alike, so each HMAC input starts with its own label:
# the server's proof can never be replayed as the client's. Both labels are 15 bytes and the
# nonces 32, so the concatenation parses one way only.
SERVER_LABEL = b"treemail-server"
CLIENT_LABEL = b"treemail-client"


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
    """The token of a data directory's TCP listener: the key both sides prove they hold."""

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

    def server_proof(self, client_nonce: bytes, server_nonce: bytes) -> bytes:
        """HMAC-SHA256(token, "treemail-server" | client_nonce | server_nonce)."""
        return self._mac(SERVER_LABEL, client_nonce, server_nonce)

    def client_proof(self, server_nonce: bytes, client_nonce: bytes) -> bytes:
        """HMAC-SHA256(token, "treemail-client" | server_nonce | client_nonce)."""
        return self._mac(CLIENT_LABEL, server_nonce, client_nonce)

    @staticmethod
    def matches(expected: bytes, presented: str) -> bool:
        """Whether ``presented`` (hex) is ``expected``, compared in constant time."""
        return hmac.compare_digest(expected.hex().encode(), presented.encode("ascii", "replace"))

    def _mac(self, label: bytes, first: bytes, second: bytes) -> bytes:
        return hmac.new(self._secret, label + first + second, hashlib.sha256).digest()


def refusal(why: str) -> Unauthorized:
    return Unauthorized(f"{why}; a TCP connection must first prove it holds the daemon's "
                        f"token (DATA_DIR/{TOKEN_FILE}, or TREEMAIL_TOKEN) with auth.challenge "
                        "then auth.prove (spec/protocol.md, section 2); the connection is "
                        "closed")


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
