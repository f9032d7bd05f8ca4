"""Starting ``treemail mcp``: over stdio with one session's token, or over loopback HTTP.

Over stdio the identity is bound at launch: the token is read from a private file
(``--token-file``, never the command line, where other users can read it in the process
list), checked by the daemon before the first MCP message is read, and set as the access
token of every request for the process's life. Over HTTP the server has no identity of its
own: each request's bearer token is checked by the daemon (``server.Bearer``).
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import anyio

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.errors import TokenFileUnsafe
from treemail.adapters.daemon.tcp import loopback
from treemail.adapters.mcp.links import Connect, Links
from treemail.adapters.mcp.server import Bearer, TreemailMCP
from treemail.core.errors import TreemailError

__all__ = ["read_token", "serve_http", "serve_stdio", "write_token"]


def read_token(path: Path) -> str:
    """A session token from a file that only its owner may read (mode 0600)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TokenFileUnsafe(f"{path}: cannot open the session token file ({exc.strerror}); "
                              "`treemail attach --token-file` writes one", path=str(path)
                              ) from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as file:
        info = os.fstat(file.fileno())
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or stat.S_IMODE(info.st_mode) & 0o077):
            raise TokenFileUnsafe(
                f"{path}: a session token file must be a regular file of yours with mode 0600 "
                f"(it is {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}); others "
                "may have read it: revoke the token (`treemail tokens revoke`) and issue "
                "another", path=str(path))
        return file.read().strip()


def write_token(path: Path, token: str) -> None:
    """Write a new token file, mode 0600 from its creation; an existing file is refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise TokenFileUnsafe(f"{path}: cannot create the token file ({exc.strerror}); name a "
                              "file that does not exist yet", path=str(path)) from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")


def _connector(socket_path: Path) -> Connect:
    async def connect() -> DaemonClient:
        return await DaemonClient.connect(socket_path, name="treemail-mcp", token=None)

    return connect


def serve_stdio(socket_path: Path, token_file: Path) -> int:
    """The MCP server on stdin/stdout, as the session ``token_file`` names."""
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    token = read_token(token_file)
    links = Links(_connector(socket_path))

    async def main() -> int:
        try:
            link = await links.get(token)  # refused here, before any MCP message, if bad
        except RpcFailure as failure:
            print(f"treemail mcp: {failure.error.message} [{failure.data_code}]",
                  file=sys.stderr)
            return 1
        except (OSError, TreemailError) as error:
            print(f"treemail mcp: {error}", file=sys.stderr)
            return 1
        # Every request of this process acts as this session: the context is inherited by
        # the tasks the SDK starts for them.
        auth_context_var.set(AuthenticatedUser(AccessToken(
            token=token, client_id=link.session_id, scopes=[], subject=link.session_id)))
        try:
            await TreemailMCP(links).run_stdio_async()
        finally:
            await links.close()
        return 0

    return anyio.run(main)


def serve_http(socket_path: Path, host: str, port: int) -> int:
    """The MCP server over streamable HTTP on a loopback address; each request brings its
    own bearer token. The address bound is printed on stderr (port 0 picks one)."""
    import uvicorn
    from mcp.server.auth.settings import AuthSettings

    loopback(host, port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the address is announced: a client that connects as soon as it reads
    # the line is queued until uvicorn accepts, not refused (a bound socket that does not
    # listen yet answers a connect with a reset).
    sock.listen(128)
    bound = sock.getsockname()[1]
    where = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
    links = Links(_connector(socket_path))
    from pydantic import AnyHttpUrl

    server = TreemailMCP(links, per_session=True, token_verifier=Bearer(links), auth=AuthSettings(
        issuer_url=AnyHttpUrl(f"http://{where}"),
        resource_server_url=AnyHttpUrl(f"http://{where}/mcp"),
        # Tokens are the daemon's session tokens, checked by the daemon (Bearer), not
        # OAuth tokens with an audience.
        validate_token_resource=False))
    app = server.streamable_http_app(host=host)
    print(f"treemail mcp: serving http://{where}/mcp", file=sys.stderr, flush=True)

    async def main() -> int:
        config = uvicorn.Config(app, log_level="warning")
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            await links.close()
        return 0

    return anyio.run(main)
