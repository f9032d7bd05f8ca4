"""External sessions on the command line: ``attach``, ``tokens`` and ``mcp``.

``treemail attach --parent SESSION --agent NAME`` makes an external session in SESSION's
tree and prints its token (or writes it to a new 0600 file with ``--token-file``): the only
copy, since the daemon keeps a digest. ``treemail tokens list|issue|revoke`` manage tokens
by their ids. ``treemail mcp`` runs the MCP server an MCP host launches, as the session its
token names (stdio) or for each request's bearer token (``--http``, loopback only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec

from treemail.adapters.daemon.client import DEFAULT_TIMEOUT, DaemonClient
from treemail.adapters.ui.commands import (
    Sub,
    _client,
    _connect_and,
    _tcp,
    _where,
    json_line,
    json_option,
    seconds,
)
from treemail.core.errors import InvalidRequest, TreemailError
from treemail.protocol import external as x
from treemail.protocol import methods as m

__all__ = ["register"]


def register(commands: Sub) -> None:
    # Not ``_client``: its --token-file is the daemon's TCP token, and here --token-file is
    # where the new session's token goes (a TCP daemon's token comes from TREEMAIL_TOKEN).
    attach = commands.add_parser(
        "attach", help="make an external session (an MCP client drives it) in a tree, and "
                       "print its token")
    _where(attach)
    attach.add_argument("--connect", metavar="ADDRESS",
                        help="the daemon's address: tcp://HOST:PORT, or a socket path")
    attach.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="how long each call waits for the daemon's answer")
    json_option(attach)
    attach.set_defaults(run=lambda args: _connect_and(_attach, args), token_file=None)
    attach.add_argument("--parent", dest="session", required=True,
                        help="its parent session (UUID, handle or UUID prefix)")
    attach.add_argument("--agent", required=True, help="the agent whose doc sets its rules")
    attach.add_argument("--description", default="", help="what it does, shown to its peers")
    attach.add_argument("--token-file", dest="session_token_file", type=Path,
                        help="write the token to this new file (mode 0600) instead of stdout")
    tokens = _client(commands, "tokens", "list, issue or revoke external sessions' tokens",
                     _tokens)
    tokens.add_argument("action", choices=("list", "issue", "revoke"))
    tokens.add_argument("target", nargs="?",
                        help="issue: the session; revoke: the token id; list: a session")
    mcp = commands.add_parser(
        "mcp", help="serve MCP as an external session (stdio), or over loopback HTTP")
    mcp.add_argument("--data-dir", type=Path, default=Path("./.treemail"),
                     help="the daemon's data directory (default: ./.treemail)")
    mcp.add_argument("--socket", type=Path,
                     help="the daemon's Unix socket (default: DATA_DIR/daemon.sock)")
    how = mcp.add_mutually_exclusive_group(required=True)
    how.add_argument("--token-file", type=Path,
                     help="stdio: the session token's file (mode 0600), from "
                          "`treemail attach --token-file`")
    how.add_argument("--http", metavar="HOST:PORT", type=_tcp,
                     help="streamable HTTP on a loopback address; each request brings its "
                          "own session token as a bearer token")
    mcp.set_defaults(run=_mcp)


async def _attach(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.mcp.launch import write_token

    if args.session_token_file is not None and args.session_token_file.exists():
        raise _exists(args.session_token_file)  # before the session is made, not after
    made = await client.request(m.EXTERNAL_ATTACH, x.ExternalAttachParams(
        parent_session_id=args.session, agent=args.agent, description=args.description))
    session = made.session
    if args.session_token_file is not None:
        write_token(args.session_token_file, made.token)
    if args.json:
        answer: dict[str, Any] = msgspec.to_builtins(made)
        shown = {k: v for k, v in answer.items() if k != "token"}
        json_line(shown if args.session_token_file is not None else answer)
        return 0
    print(f"external session {session.handle} ({session.session_id}), "
          f"token id {made.token_id}", file=sys.stderr)
    if args.session_token_file is None:
        print(made.token)
    return 0


async def _tokens(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.daemon import lookup
    from treemail.adapters.ui.console import print_table

    if args.action in ("issue", "revoke") and not args.target:
        raise InvalidRequest(f"tokens {args.action} needs its target: "
                            + ("the session" if args.action == "issue" else "the token id"))
    if args.action == "issue":
        sid = await lookup.session_id(client, str(args.target))
        issued = await client.request(m.EXTERNAL_TOKENS_ISSUE,
                                      x.ExternalTokenIssueParams(session_id=sid))
        print(issued.token)
        print(f"token id {issued.token_id}", file=sys.stderr)
        return 0
    if args.action == "revoke":
        rows = [await client.request(m.EXTERNAL_TOKENS_REVOKE,
                                     x.ExternalTokenRevokeParams(token_id=str(args.target)))]
    else:
        listed = await lookup.session_id(client, args.target) if args.target else None
        rows = (await client.request(m.EXTERNAL_TOKENS_LIST,
                                     x.ExternalTokensListParams(session_id=listed))).tokens
    if args.json:
        for row in rows:
            json_line(msgspec.to_builtins(row))
        return 0
    print_table(("TOKEN ID", "SESSION", "HANDLE", "AGENT", "STATE"),
                [(r.token_id, r.session_id, r.handle or "-", r.agent,
                  "revoked" if r.revoked else "live") for r in rows])
    return 0


def _exists(path: Path) -> TreemailError:
    from treemail.adapters.daemon.errors import TokenFileUnsafe

    return TokenFileUnsafe(f"{path} exists; name a new file for the token (it is written "
                           "once, mode 0600)", path=str(path))


def _mcp(args: argparse.Namespace) -> int:
    from treemail.adapters.ui import extras

    socket_path = args.socket or args.data_dir / "daemon.sock"
    try:
        launch = extras.load("treemail.adapters.mcp.launch", "mcp", "mcp")
        if args.token_file is not None:
            code: int = launch.serve_stdio(socket_path, args.token_file)
            return code
        host, port = args.http
        code = launch.serve_http(socket_path, host, port)
        return code
    except TreemailError as error:
        print(f"treemail mcp: {error.message} [{error.code}]", file=sys.stderr)
        return 1
