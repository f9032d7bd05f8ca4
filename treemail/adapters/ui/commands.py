"""The daemon's subcommands of the ``treemail`` command line, registered from ``cli.py``.

``daemon`` serves a data directory; the others are clients of a running daemon, found by
``--data-dir`` (its ``daemon.sock``), ``--socket``, or ``--connect tcp://HOST:PORT`` (proving
the daemon's token without sending it, see ``handshake.py``). A daemon that is not there, one
that does not answer within ``--timeout`` seconds (stopped, hung), one that closes the
connection, a TCP listener that does not prove itself, an answer or a request over a frame
limit, or an error answer, is one line on stderr and exit status 1; a bad command line is
argparse's usage error (status 2); never a traceback. That line says what happened first and
ends with the stable code in brackets (``[engine:unknown_target]``); with ``--json`` it is one
JSON object with ``error`` and ``code`` apart, as every listing's rows are JSON lines there.

Client commands import little at start (no engine, no store, no rich until a table is
printed): a person types them, and scripts call them in loops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

from treemail.adapters.daemon.client import DEFAULT_TIMEOUT, DaemonClient, RpcFailure
from treemail.adapters.daemon.tcp import TOKEN_FILE, parse_address
from treemail.adapters.ui import feed
from treemail.adapters.ui.feed import Names, answer_line, follow, json_line, view_row
from treemail.adapters.ui.terminal import visible
from treemail.core.approvals import SCOPES
from treemail.core.errors import TreemailError
from treemail.core.records import GrantScope
from treemail.protocol import methods as m
from treemail.protocol import types as t

if TYPE_CHECKING:
    pass

__all__ = ["Names", "TokenMissing", "address_options", "answer_line", "client_command",
           "connected_demo", "extend_demo", "follow", "json_line", "json_option",
           "register", "seconds", "shown_state", "state_text", "steered", "store_option",
           "target", "view_row", "waiting_sessions"]

Command = Callable[[DaemonClient, argparse.Namespace], Awaitable[int]]
Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register(commands: Sub) -> None:
    daemon = commands.add_parser(
        "daemon", help="serve a data directory over JSON-RPC (protocol 19)")
    _where(daemon)
    daemon.add_argument("--stdio", action="store_true",
                        help="also serve one client over stdin/stdout")
    daemon.add_argument("--tcp", metavar="HOST:PORT", type=_tcp,
                        help="also listen on TCP, loopback only, with a token kept in "
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
    tail = _client(commands, "tail", "follow the event feed live (all sessions or one)", feed.tail)
    tail.add_argument("session", nargs="?",
                      help="only this session (UUID, handle or UUID prefix)")
    tail.add_argument("-n", "--lines", type=_count, default=0, metavar="N",
                      help="first show the last N events of the history, then follow")
    replay = _client(commands, "replay", "print a session's whole event log", feed.replay)
    replay.add_argument("session", help="the session (UUID, handle or UUID prefix)")
    approve = _client(commands, "approve",
                      "list held tool calls, or answer one by its approval id", _approve)
    approve.add_argument("approval_id", nargs="?",
                         help="the approval: its short id as rows print it, or its whole id")
    approve.add_argument("--deny", action="store_true", help="deny instead of approving")
    approve.add_argument("--scope", choices=SCOPES, default=GrantScope.ONCE.value)
    approve.add_argument("--reason", help="with --deny: why, told to the agent in its result")


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
                        help="the TCP token's file (default: DATA_DIR/daemon.token; "
                             "TREEMAIL_TOKEN overrides it)")


def client_command(commands: Sub, name: str, help: str,
                   command: Command) -> argparse.ArgumentParser:
    """A client command of another module (``run``, ``cancel``): the options every client
    command takes (where the daemon is, ``--timeout``, ``--json``), failures said alike."""
    return _client(commands, name, help, command)


def _client(commands: Sub, name: str, help: str, command: Command) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help)
    address_options(parser)
    parser.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="how long each call waits for the daemon's answer (default: "
                             f"{DEFAULT_TIMEOUT:g})")
    json_option(parser)
    parser.set_defaults(run=lambda args: _connect_and(command, args))
    return parser


def address_options(parser: argparse.ArgumentParser) -> None:
    """Where the daemon is (``--data-dir``, ``--socket``, ``--connect``) and the TCP token's
    file: what ``target`` reads."""
    _where(parser)
    parser.add_argument("--connect", metavar="ADDRESS",
                        help="the daemon's address: tcp://HOST:PORT, or a socket path")
    _token_option(parser)


def json_option(parser: argparse.ArgumentParser) -> None:
    """``--json``: JSON lines on stdout, one object a line, field names that stay (the wire's);
    a failure is one object on stderr, its ``code`` apart from its ``error``."""
    parser.add_argument("--json", action="store_true",
                        help="print JSON lines (one object a line) instead of text")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


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
        client = await _connected(args)
        if isinstance(client, int):
            return client
        try:
            await _resolve(client, args)
            return await command(client, args)
        except RpcFailure as failure:
            return _failed(args, failure.error.message, _code(failure))
        except TreemailError as error:  # a form naming no one id; no answer in time ...
            return _failed(args, error.message, error.code)
        except BrokenPipeError:  # stdout's reader went away (`| head`): main's to handle
            raise
        except ConnectionError:
            return _failed(args, "the daemon closed the connection before answering: it "
                                 "stopped or died; start it again with `treemail daemon`")
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        return 0


async def _connected(args: argparse.Namespace) -> DaemonClient | int:
    """A client of the daemon the command line names, or the exit status of the failure,
    said in one line."""
    address = "the daemon's address"
    try:
        address, token = target(args)
        return await DaemonClient.connect(address, name=f"treemail {args.command}",
                                          token=token, timeout=args.timeout)
    except TokenMissing as missing:
        return _failed(args, str(missing))
    except OSError as exc:
        if exc.strerror is None:  # the client's own ConnectionError: the daemon hung up
            return _failed(args, f"the daemon at {address} closed the connection at once: "
                                 "it is stopping, or it refused this client")
        return _failed(args, f"no daemon at {address} ({exc.strerror}); start one with "
                             "`treemail daemon`")
    except RpcFailure as failure:
        return _failed(args, failure.error.message, _code(failure))
    except TreemailError as error:  # no answer in time, a frame over a limit, an unproven listener
        return _failed(args, error.message, error.code)


def _failed(args: argparse.Namespace, why: str, code: str | None = None) -> int:
    """One line on stderr, newlines and control characters escaped; status 1. What happened
    comes first, for the person reading it; the stable code last, in brackets, for a search
    or a script (``--json`` gives it a field of its own)."""
    if getattr(args, "json", False):
        print(json.dumps({"command": args.command, "error": why, "code": code},
                         ensure_ascii=False), file=sys.stderr)
        return 1
    # A message written for a model may run over lines (a list of peers): one line here.
    said = " ".join(line.strip() for line in why.splitlines() if line.strip())
    print(f"treemail {args.command}: {visible(said)}" + (f" [{code}]" if code else ""),
          file=sys.stderr)
    return 1


def _code(failure: RpcFailure) -> str:
    """A failure's stable code: treemail's own, else the JSON-RPC error number."""
    return failure.data_code or f"jsonrpc:{failure.code}"


async def _resolve(client: DaemonClient, args: argparse.Namespace) -> None:
    """The session and message forms an operator typed, as the ids the daemon takes."""
    from treemail.adapters.daemon import lookup

    for name in ("sender", "session"):
        if text := getattr(args, name, None):
            setattr(args, name, await lookup.session_id(client, text))
    if text := getattr(args, "message_id", None):
        args.message_id = await lookup.message_id(client, text)
    if text := getattr(args, "approval_id", None):
        args.approval_id = await lookup.approval_id(client, text)


async def _sessions(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.ui.console import print_table

    sessions = await client.every(m.SESSION_LIST, t.SessionListParams())
    held = await client.request(m.APPROVAL_LIST, t.ApprovalListParams())
    waiting = waiting_sessions(msgspec.to_builtins(held.approvals))
    if args.json:  # the wire's state as it is, and whether the user holds it up beside it
        for session in sessions:
            json_line({**msgspec.to_builtins(session),
                       "waiting_on_you": session.session_id in waiting})
        return 0
    print_table(("SESSION", "HANDLE", "AGENT", "STATE", "PARENT"),
                [(s.session_id, s.handle or "-", s.agent,
                  shown_state(msgspec.to_builtins(s), waiting), s.parent_session_id or "-")
                 for s in sessions])
    return 0


async def _send(client: DaemonClient, args: argparse.Namespace) -> int:
    import uuid

    result = await client.request(m.TOOL_CALL, t.ToolCallParams(
        session_id=args.sender, tool_call_id=f"operator-{uuid.uuid4()}",
        name="send_message",
        arguments={"to": args.to, "body": args.body, "mode": args.mode}))
    held = result.approval_id
    refused = None if held else _refusal(result.content)
    if refused is not None:  # the tool error the model would see: for a person, a failure
        return _failed(args, *refused)
    if args.json:
        json_line(msgspec.to_builtins(result))
        return 0
    print(visible(result.content))
    if held:  # not refused: it waits for the user, and goes out once approved
        from treemail.adapters.daemon.lookup import short_approval_id

        print(f"held for approval: treemail approve {short_approval_id(held)}")
    return 0


def _refusal(content: str) -> tuple[str, str] | None:
    """The message and code of a refused ``send_message``, whose content is the tool error
    ``{"error": code, "message": message}``; None for a result."""
    try:
        value = json.loads(content)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("error"), str) and value["error"]:
        return str(value.get("message") or value["error"]), value["error"]
    return None


# What each recipient_state of a steer means for the text, printed beside the stable value
# (which scripts may match on).
def steered() -> dict[str, str]:
    """What each recipient_state of a steer means for the text, printed beside the stable
    value (which scripts may match on). A function, so that the core's records load only
    when a steer is answered."""
    from treemail.core.records import RecipientState

    return {
        RecipientState.RUNNING: "it joins the run at its next model request",
        RecipientState.QUEUED: "it waits for the session's next run",
        RecipientState.WAKING_FINISHED: "the session had finished: a new run starts with it",
    }


async def _steer(client: DaemonClient, args: argparse.Namespace) -> int:
    accepted = await client.steer(args.session, args.text)
    if args.json:
        json_line(msgspec.to_builtins(accepted))
        return 0
    state = accepted.recipient_state
    meaning = steered().get(str(state))  # none for a value of a later protocol
    print(f"message {accepted.message_id}: mode {accepted.mode}, recipient {state}"
          + (f" ({meaning})" if meaning else ""))
    return 0


async def _status(client: DaemonClient, args: argparse.Namespace) -> int:
    receipt = await client.request(m.MESSAGE_GET, t.MessageGetParams(message_id=args.message_id))
    message, history = receipt.message, msgspec.to_builtins(receipt.history)
    if args.json:  # the receipt as the wire has it, each step with its state as read
        json_line({**msgspec.to_builtins(receipt),
                   "history": [{**step, "state": state_text(step)} for step in history]})
        return 0
    from treemail.adapters.ui.console import print_table

    print(visible(f"message {message.message_id} to {message.recipient}: "
                  f"{message.state} ({message.owner}, {message.mode})"), flush=True)
    print_table(("SEQ", "STATE", "RUN", "REQUEST"),
                [(f"#{step['seq']}", state_text(step), step.get("run_id") or "-",
                  step.get("request_id") or "-") for step in history])
    return 0


def state_text(step: Mapping[str, Any]) -> str:
    """A receipt's step as people say it: ``accepted``, ``claimed``, ``discarded: REASON``;
    the event's class name (``ProducerMessageDiscarded``) is the log's word, not theirs."""
    from treemail.core.events import EventKind, message_kind

    kind = str(step["kind"])
    try:  # PRODUCER_MESSAGE_DISCARDED -> discarded, if that is the state it records
        state = EventKind(kind).name.rsplit("_", 1)[-1].lower()
        state = state if message_kind(state).value == kind else kind
    except ValueError:  # a kind this client does not know: shown as it is
        state = kind
    return f"{state}: {step['reason']}" if step.get("reason") else state


def waiting_sessions(approvals: list[dict[str, Any]]) -> set[str]:
    """The sessions a held call of which waits for the user's answer (pending approvals)."""
    return {held["session_id"] for held in approvals}


def shown_state(session: Mapping[str, Any], waiting: set[str]) -> str:
    """A session's state as the user reads it: a session whose call waits for them says so,
    whatever its run's state (a run waiting on an approval is still ``running``)."""
    from treemail.adapters.ui.tui.board import WAITING

    return WAITING if session["session_id"] in waiting else str(session["state"])


async def _approve(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.daemon.lookup import short_approval_id

    if args.approval_id is None:
        listed = await client.request(m.APPROVAL_LIST, t.ApprovalListParams())
        held: list[dict[str, Any]] = msgspec.to_builtins(listed.approvals)
        for a in held:
            short = short_approval_id(a["approval_id"])
            if args.json:
                json_line({"short_id": short, **a})
                continue
            # The short id first, as the transcript's rows name the approval; the whole id
            # last, for a script that wants no lookup.
            print(visible(f"approval {short}  {a['tool']} {a['arguments']} "
                          f"({a['label']} peer)  {a['approval_id']}"))
        if not held and not args.json:
            print("no tool call waits for approval")
        return 0
    answered: dict[str, Any] = msgspec.to_builtins(await client.request(
        m.APPROVAL_ANSWER, t.ApprovalAnswerParams(
            approval_id=args.approval_id, approve=not args.deny, scope=args.scope,
            reason=args.reason)))
    if args.json:
        json_line({"short_id": short_approval_id(args.approval_id), **answered})
        return 0
    print(answer_line(answered))
    return 0
