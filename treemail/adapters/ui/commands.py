"""The daemon's subcommands of the ``treemail`` command line, registered from ``cli.py``.

``daemon`` serves a data directory; the others are clients of a running daemon, found by
``--data-dir`` (its ``daemon.sock``), ``--socket``, or ``--connect tcp://HOST:PORT`` (with
the daemon's bearer token, see ``tcp.py``). A daemon that is not there, or an
error answer, is one line on stderr and exit status 1; a bad command line is argparse's
usage error (status 2); never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeAlias

from treemail.adapters.daemon import lookup
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.tcp import TOKEN_FILE, parse_address
from treemail.adapters.ui.transcript import Row, event_row
from treemail.core.errors import TreemailError
from treemail.core.events import EventKind
from treemail.core.records import Event, RecipientState

__all__ = ["TokenMissing", "answer_line", "connected_demo", "extend_demo", "register",
           "seconds", "store_option", "target", "view_row"]

Command = Callable[[DaemonClient, argparse.Namespace], Awaitable[int]]
Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register(commands: Sub) -> None:
    daemon = commands.add_parser(
        "daemon", help="serve a data directory over JSON-RPC (protocol 19)")
    _where(daemon)
    daemon.add_argument("--stdio", action="store_true",
                        help="also serve one client over stdin/stdout")
    daemon.add_argument("--tcp", metavar="HOST:PORT", type=_tcp,
                        help="also listen on TCP, loopback only, with a bearer token kept in "
                             "DATA_DIR/daemon.token (mode 0600)")
    store_option(daemon, "the store to serve (default: DATA_DIR/store)")
    daemon.set_defaults(run=_daemon)
    _client(commands, "sessions", "list the daemon's sessions as a table", _sessions)
    send = _client(commands, "send", "send agent mail as a session's running run (operators)",
                   _send)
    send.add_argument("--as", dest="sender", required=True,
                      help="the sending session (UUID, handle or UUID prefix)")
    send.add_argument("to", help="the recipient: a handle or a session UUID")
    send.add_argument("body", help="the message")
    send.add_argument("--mode", choices=("steer", "queue"), default="queue")
    steer = _client(commands, "steer", "steer a session's run in flight as the user", _steer)
    steer.add_argument("session", help="the session (UUID, handle or UUID prefix)")
    steer.add_argument("text", help="what to tell it")
    status = _client(commands, "status", "a message's receipt: state and history", _status)
    status.add_argument("message_id", help="the message (UUID, or a unique prefix of it)")
    tail = _client(commands, "tail", "follow the event feed live (all sessions or one)", _tail)
    tail.add_argument("session", nargs="?",
                      help="only this session (UUID, handle or UUID prefix)")
    replay = _client(commands, "replay", "print a session's whole event log", _replay)
    replay.add_argument("session", help="the session (UUID, handle or UUID prefix)")
    approve = _client(commands, "approve",
                      "list held tool calls, or answer one by its approval id", _approve)
    approve.add_argument("approval_id", nargs="?")
    approve.add_argument("--deny", action="store_true", help="deny instead of approving")
    approve.add_argument("--scope", choices=("once", "session", "tree"), default="once")


def extend_demo(demo: argparse.ArgumentParser) -> None:
    """``treemail demo --connect [ADDRESS]``: the demo's options for driving a daemon."""
    demo.add_argument("--connect", nargs="?", const=True, default=False, metavar="ADDRESS",
                      help="drive a demo through a running daemon: its socket (see "
                           "--data-dir, --socket), or ADDRESS, tcp://HOST:PORT or a socket")
    demo.add_argument("--approve", action="store_true",
                      help="with --connect: the demo answers its own approval (approve once) "
                           "instead of waiting for you to, for unattended runs")
    demo.add_argument("--wait", type=seconds, default=None, metavar="SECONDS",
                      help="with --connect: how long the demo waits for its approval to be "
                           "answered (default: 300)")
    _where(demo)
    _token_option(demo)


def connected_demo(args: argparse.Namespace) -> int:
    from treemail.adapters.ui.demo_connect import WAIT
    from treemail.adapters.ui.demo_connect import main as connected

    try:
        address, token = target(args)
    except TokenMissing as missing:
        print(f"treemail demo: {missing}", file=sys.stderr)
        return 1
    return connected(address, token, approve=args.approve,
                     wait=WAIT if args.wait is None else args.wait)


class TokenMissing(Exception):
    """A TCP address was given, and no token found for it."""


def target(args: argparse.Namespace) -> tuple[str, str | None]:
    """Where a client command connects, and the token it presents: ``--connect ADDRESS``
    (``tcp://HOST:PORT`` or a socket path), else ``--socket``, else DATA_DIR's socket. A TCP
    address takes its token from ``TREEMAIL_TOKEN``, else ``--token-file`` (by default
    DATA_DIR/daemon.token); a token is never given on the command line, where ``ps`` shows
    it to everyone."""
    connect = args.connect if isinstance(args.connect, str) else None
    address = connect or str(args.socket or args.data_dir / "daemon.sock")
    if not address.startswith("tcp://"):
        return address, None
    if token := os.environ.get("TREEMAIL_TOKEN", "").strip():
        return address, token
    path = args.token_file or args.data_dir / TOKEN_FILE
    try:
        return address, path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenMissing(f"{address} needs the daemon's token: set TREEMAIL_TOKEN, or "
                           f"point --token-file at it (cannot read {path}: {exc})") from None


def _tcp(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds(text: str) -> float:
    """A number of seconds (a poll interval, a wait): finite, above zero, below a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and below 86400 seconds")
    return value


def _where(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path("./.treemail"),
                        help="the data directory (default: ./.treemail)")
    parser.add_argument("--socket", type=Path,
                        help="the Unix socket (default: DATA_DIR/daemon.sock)")


def store_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--store URL``: a path or lmdb:PATH, memory:, or postgresql://... (the factory's forms)."""
    parser.add_argument("--store", metavar="URL",
                        help=f"{help}: a directory or lmdb:PATH, memory:, or postgresql://...")


def _token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token-file", type=Path,
                        help="the TCP bearer token's file (default: DATA_DIR/daemon.token; "
                             "TREEMAIL_TOKEN overrides it)")


def _client(commands: Sub, name: str, help: str, command: Command) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help)
    _where(parser)
    parser.add_argument("--connect", metavar="ADDRESS",
                        help="the daemon's address: tcp://HOST:PORT, or a socket path")
    _token_option(parser)
    parser.set_defaults(run=lambda args: _connect_and(command, args))
    return parser


def _daemon(args: argparse.Namespace) -> int:
    from treemail.adapters.daemon.host import run_daemon

    try:
        return asyncio.run(run_daemon(args.data_dir, args.socket, args.stdio, args.tcp,
                                      args.store))
    except TreemailError as error:
        print(f"treemail daemon: {error}", file=sys.stderr)
        return 2


def _connect_and(command: Command, args: argparse.Namespace) -> int:
    async def go() -> int:
        try:
            address, token = target(args)
            client = await DaemonClient.connect(address, name=f"treemail {args.command}",
                                                token=token)
        except TokenMissing as missing:
            print(f"treemail {args.command}: {missing}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"treemail {args.command}: no daemon at {address} ({exc.strerror}); start "
                  "one with `treemail daemon`", file=sys.stderr)
            return 1
        except RpcFailure as failure:
            print(f"treemail {args.command}: {failure.data_code}: {failure.error.message}",
                  file=sys.stderr)
            return 1
        try:
            await _resolve(client, args)
            return await command(client, args)
        except RpcFailure as failure:
            print(f"treemail {args.command}: {failure.data_code}: {failure.error.message}",
                  file=sys.stderr)
            return 1
        except TreemailError as error:  # a session or message form that names no one id
            print(f"treemail {args.command}: {error}", file=sys.stderr)
            return 1
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        return 0


async def _resolve(client: DaemonClient, args: argparse.Namespace) -> None:
    """The session and message forms an operator typed, as the ids the daemon takes."""
    for name in ("sender", "session"):
        if text := getattr(args, name, None):
            setattr(args, name, await lookup.session_id(client, text))
    if text := getattr(args, "message_id", None):
        args.message_id = await lookup.message_id(client, text)
    if text := getattr(args, "approval_id", None):
        args.approval_id = await lookup.approval_id(client, text)


async def _sessions(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.ui.console import print_table

    sessions = (await client.call("session.list"))["sessions"]
    print_table(("SESSION", "HANDLE", "AGENT", "STATE", "PARENT"),
                [(s["session_id"], s["handle"] or "-", s["agent"], s["state"],
                  s["parent_session_id"] or "-") for s in sessions])
    return 0


async def _send(client: DaemonClient, args: argparse.Namespace) -> int:
    import uuid

    result = await client.call("tool.call", {
        "session_id": args.sender, "tool_call_id": f"operator-{uuid.uuid4()}",
        "name": "send_message",
        "arguments": {"to": args.to, "body": args.body, "mode": args.mode}})
    print(result["content"])
    if result.get("approval_id"):
        print(f"held for approval: treemail approve {result['approval_id']}")
    return 0


# What each recipient_state of a steer means for the text, printed beside the stable value
# (which scripts may match on).
STEERED: dict[str, str] = {
    RecipientState.RUNNING: "it joins the run at its next model request",
    RecipientState.QUEUED: "it waits for the session's next run",
    RecipientState.WAKING_FINISHED: "the session had finished: a new run starts with it",
}


async def _steer(client: DaemonClient, args: argparse.Namespace) -> int:
    accepted = await client.call("run.steer", {"session_id": args.session, "text": args.text})
    state = accepted["recipient_state"]
    meaning = STEERED.get(state)
    print(f"message {accepted['message_id']}: mode {accepted['mode']}, recipient {state}"
          + (f" ({meaning})" if meaning else ""))
    return 0


async def _status(client: DaemonClient, args: argparse.Namespace) -> int:
    receipt = await client.call("message.get", {"message_id": args.message_id})
    message = receipt["message"]
    from treemail.adapters.ui.console import print_table

    print(f"message {message['message_id']} to {message['recipient']}: {message['state']} "
          f"({message['owner']}, {message['mode']})", flush=True)
    print_table(("SEQ", "KIND", "RUN", "REQUEST", "REASON"),
                [(f"#{step['seq']}", step["kind"], step.get("run_id") or "-",
                  step.get("request_id") or "-", step.get("reason") or "-")
                 for step in receipt["history"]])
    return 0


async def _names(client: DaemonClient) -> dict[str, str]:
    sessions = (await client.call("session.list"))["sessions"]
    return {s["session_id"]: s["handle"] or s["session_id"] for s in sessions}


def view_row(view: dict[str, Any], names: dict[str, str]) -> Row:
    """An event view of the wire as its transcript row, sessions named by ``names``."""
    event = Event(view["session_id"], view["seq"], view["kind"], view["data"])
    return event_row(event, lambda sid: names.get(sid or "", sid or "?"))


async def _tail(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.ui.console import console, print_row

    head = (await client.call("events.read", {"after": 0, "limit": 1}))["head"]
    await client.call("events.subscribe", {"after": head, "session_id": args.session})
    # On stderr, so the rows on stdout stay the feed alone; it says tail is now following.
    print(f"treemail tail: following the feed after #{head}; Ctrl-C stops", file=sys.stderr,
          flush=True)
    out, shown = console(), head
    try:
        names = await _names(client)
        while True:  # an idle feed is followed for as long as it takes
            view = (await client.next_notification("events/event", timeout=None)).params[
                "event"]
            if view["kind"] == EventKind.SESSION_CREATED or view["session_id"] not in names:
                names = await _names(client)
            print_row(view_row(view, names), out)
            shown = view["number"]
    except ConnectionError:  # the daemon stopped, or died: say so, never wait on it
        print(f"treemail tail: the daemon closed the connection after #{shown}: it stopped "
              "or died; start it again with `treemail daemon`, then tail again",
              file=sys.stderr, flush=True)
        return 1


async def _replay(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.ui.console import console, print_row

    out = console()
    names = await _names(client)
    after = 0
    while True:
        page = await client.call("events.read", {"after": after, "session_id": args.session})
        for view in page["events"]:
            print_row(view_row(view, names), out)
        after = page["next"]
        if after >= page["head"]:
            return 0


def answer_line(answered: dict[str, Any]) -> str:
    """An answered approval as one line: its state, the scope of an approval, the outcome."""
    scope = f" (scope {answered['scope']})" if answered.get("scope") else ""
    return f"{answered['state']}{scope}: {answered['outcome']}"


async def _approve(client: DaemonClient, args: argparse.Namespace) -> int:
    if args.approval_id is None:
        held = (await client.call("approval.list"))["approvals"]
        for a in held:
            print(f"{a['approval_id']}  {a['tool']} {a['arguments']} ({a['label']} peer)")
        if not held:
            print("no tool call waits for approval")
        return 0
    answered = await client.call("approval.answer", {
        "approval_id": args.approval_id, "approve": not args.deny, "scope": args.scope})
    print(answer_line(answered))
    return 0
