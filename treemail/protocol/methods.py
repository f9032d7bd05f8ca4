"""Protocol 19's methods: one typed constant per method, notification and server request.

Each constant is a ``Method[P, R]``: its wire name, its params type ``P`` and its result type
``R`` (msgspec Structs). The client sends through them (``DaemonClient.request(SESSION_GET,
t.SessionGetParams(...))`` is typed ``t.SessionView``), the server binds its handlers to them
(``@handles(SESSION_GET)``), and the bindings are generated from the tables derived below, so
a method exists on the wire exactly when it has a constant listed in ``METHODS``, and a renamed
method or field is a type error at every use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import msgspec

from treemail.protocol import external as x
from treemail.protocol import receipts as rc
from treemail.protocol import types as t
from treemail.protocol.rules import PATTERNS

__all__ = [
    "APPROVAL_ANSWER",
    "APPROVAL_LIST",
    "AUTH_CHALLENGE",
    "AUTH_PROVE",
    "BOUND",
    "EVENTS_EVENT",
    "EVENTS_READ",
    "EVENTS_SUBSCRIBE",
    "EVENTS_UNSUBSCRIBE",
    "EXTERNAL_ATTACH",
    "EXTERNAL_BIND",
    "EXTERNAL_CALL",
    "EXTERNAL_CHECK_MAIL",
    "EXTERNAL_MAIL",
    "EXTERNAL_TOKENS_ISSUE",
    "EXTERNAL_TOKENS_LIST",
    "EXTERNAL_TOKENS_REVOKE",
    "EXTERNAL_TOOLS",
    "INITIALIZE",
    "MESSAGE_CANCEL",
    "MESSAGE_GET",
    "MESSAGE_LIST",
    "MESSAGE_STATUS",
    "METHODS",
    "NOTIFICATIONS",
    "PAGED",
    "PLUGIN_EVENT",
    "PLUGIN_PRODUCER_SEND",
    "PLUGIN_TOOL_BEFORE_CALL",
    "PROTOCOL_VERSION",
    "RUN_CANCEL",
    "RUN_GET",
    "RUN_LIST",
    "RUN_STEER",
    "RUN_SUBMIT",
    "SERVER_REQUESTS",
    "SESSION_CREATE",
    "SESSION_DELEGATE",
    "SESSION_GET",
    "SESSION_LIST",
    "SHUTDOWN",
    "TOOL_CALL",
    "Call",
    "Method",
    "Paged",
    "ParamsError",
    "decode_params",
]

PROTOCOL_VERSION: Final = 19

P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)
Item = TypeVar("Item", bound=msgspec.Struct)  # a page's item


# ``Method.writes`` of a bound connection's methods: they act as (and write into the tree
# of) the session the connection is bound to, which no param names.
BOUND: Final = "(bound session)"


@dataclass(frozen=True)
class Method(Generic[P, R]):
    """One method of the wire: ``name`` takes ``params`` and answers ``result``.

    ``writes`` says the method writes into a tree, and what names the tree: a field of
    ``params`` (a session of it, or an approval or token of one of its sessions) or
    ``BOUND``. Daemons sharing a store send such a request to the tree's owner
    (``daemon:not_owner``), so a method that writes a tree must say so here: the owner
    check is derived from it, not kept as a list beside it."""

    name: str
    params: type[P]
    result: type[R]
    summary: str
    writes: str | None = None

    def __post_init__(self) -> None:
        # Caught at import: a misspelt field would leave the method unchecked.
        if self.writes not in (None, BOUND, *self.params.__struct_fields__):
            raise TypeError(f"{self.name}: writes={self.writes!r} is neither BOUND nor a "
                            f"field of {self.params.__name__}")


@dataclass(frozen=True)
class Call(Generic[P, R]):
    """One request of a pipeline (``DaemonClient.pipeline``): ``params`` is checked against
    the method's params type where the call is built."""

    method: Method[P, R]
    params: P


@dataclass(frozen=True)
class Paged(Method[P, R], Generic[P, R, Item]):
    """A list method: its params take ``after`` and ``limit``, its result holds the page's
    items of type ``Item`` in the field ``items`` and the cursor of the next page in ``next``.
    ``Item`` is not in any argument, so each constant names it in its annotation."""

    items: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Caught at import: a paged result must hold the field its constant names.
        fields = self.result.__struct_fields__
        if self.items not in fields or "next" not in fields or (
                "after" not in self.params.__struct_fields__):
            raise TypeError(f"{self.name}: {self.result.__name__} has no page field "
                            f"{self.items!r} (or no next / after)")

    def page(self, result: R) -> list[Item]:
        page: list[Item] = getattr(result, self.items)
        return page


AUTH_CHALLENGE: Final = Method(
    "auth.challenge", t.AuthChallengeParams, t.AuthChallengeResult,
    "TCP only, the first request: the server proves it holds the token.")
AUTH_PROVE: Final = Method(
    "auth.prove", t.AuthProveParams, t.AuthProveResult,
    "TCP only, the second request: the client proves it holds the token.")
INITIALIZE: Final = Method(
    "initialize", t.InitializeParams, t.InitializeResult,
    "The handshake; every other request before it is refused.")
SHUTDOWN: Final = Method(
    "shutdown", t.Empty, t.ShutdownResult,
    "Stop the daemon in order: new sends are refused, runs stop at a boundary.")
SESSION_CREATE: Final = Method(
    "session.create", t.SessionCreateParams, t.SessionView,
    "A new tree whose root runs an agent, known by name or given as an agent doc.")
SESSION_GET: Final = Method("session.get", t.SessionGetParams, t.SessionView, "One session.")
SESSION_LIST: Final[Paged[t.SessionListParams, t.SessionListResult, t.SessionView]] = Paged(
    "session.list", t.SessionListParams, t.SessionListResult,
    "A page of the sessions, or of one tree's, in creation order.", items="sessions")
SESSION_DELEGATE: Final = Method(
    "session.delegate", t.SessionDelegateParams, t.SessionView,
    "A child of a session in its tree; the task arrives as delegation mail.",
    writes="parent_session_id")
RUN_SUBMIT: Final = Method(
    "run.submit", t.RunSubmitParams, t.ProducerAccepted,
    "User input for the session's next run (queue mode); it wakes the session.",
    writes="session_id")
RUN_STEER: Final = Method(
    "run.steer", t.RunSteerParams, t.ProducerAccepted,
    "User steering: joins the in-flight run at its next safe boundary.",
    writes="session_id")
RUN_CANCEL: Final = Method(
    "run.cancel", t.RunCancelParams, t.RunCancelResult,
    "Cancel the session's run in flight as its user; its claimed mail is released.",
    writes="session_id")
RUN_GET: Final = Method("run.get", t.RunGetParams, t.RunView, "One run.")
RUN_LIST: Final[Paged[t.RunListParams, t.RunListResult, t.RunView]] = Paged(
    "run.list", t.RunListParams, t.RunListResult, "A page of a session's runs, in order.",
    items="runs")
MESSAGE_GET: Final = Method(
    "message.get", t.MessageGetParams, t.MessageReceipt,
    "A receipt: the message's lifecycle state and its history.")
MESSAGE_LIST: Final[Paged[t.MessageListParams, t.MessageListResult, t.MessageView]] = Paged(
    "message.list", t.MessageListParams, t.MessageListResult,
    "A page of the mail a session received, or of its pending mail.", items="messages")
MESSAGE_STATUS: Final = Method(
    "message.status", rc.SentMessageParams, rc.SentMessageStatus,
    "A sender's receipt of its own agent mail: its state, and a discard's reason.")
MESSAGE_CANCEL: Final = Method(
    "message.cancel", rc.SentMessageParams, rc.SentMessageStatus,
    "The sender recalls its own agent mail before any request claimed it.",
    writes="session_id")
TOOL_CALL: Final = Method(
    "tool.call", t.ToolCallParams, t.ToolCallResult,
    "Run a tool as the session's in-flight run (the daemon as tool executor).",
    writes="session_id")
APPROVAL_LIST: Final = Method(
    "approval.list", t.ApprovalListParams, t.ApprovalListResult,
    "Tool calls held by ask rules.")
APPROVAL_ANSWER: Final = Method(
    "approval.answer", t.ApprovalAnswerParams, t.ApprovalView,
    "Approve (scope once, session or tree) or deny a held call.",
    writes="approval_id")
EVENTS_SUBSCRIBE: Final = Method(
    "events.subscribe", t.EventsSubscribeParams, t.EventsSubscribeResult,
    "Replay the feed after a number, then stream it live: no gap, no duplicate.")
EVENTS_READ: Final = Method(
    "events.read", t.EventsReadParams, t.EventsReadResult,
    "One page of the feed after a number, optionally for one session.")
EVENTS_UNSUBSCRIBE: Final = Method(
    "events.unsubscribe", t.EventsUnsubscribeParams, t.EventsUnsubscribeResult,
    "End a subscription.")
EXTERNAL_ATTACH: Final = Method(
    "external.attach", x.ExternalAttachParams, x.ExternalAttachResult,
    "An external session (an MCP client drives it) in a tree, and its token.",
    writes="parent_session_id")
EXTERNAL_TOKENS_ISSUE: Final = Method(
    "external.tokens.issue", x.ExternalTokenIssueParams, x.ExternalTokenIssueResult,
    "Another token for an external session.",
    writes="session_id")
EXTERNAL_TOKENS_LIST: Final = Method(
    "external.tokens.list", x.ExternalTokensListParams, x.ExternalTokensListResult,
    "The tokens issued, live and revoked, by id (never the tokens).")
EXTERNAL_TOKENS_REVOKE: Final = Method(
    "external.tokens.revoke", x.ExternalTokenRevokeParams, x.ExternalTokenView,
    "Revoke a token: connections bound by it are refused from their next call.",
    writes="token_id")
EXTERNAL_BIND: Final = Method(
    "external.bind", x.ExternalBindParams, x.ExternalBindResult,
    "Bind this connection to the session a token names, for the connection's life.",
    writes="token")
EXTERNAL_TOOLS: Final = Method(
    "external.tools", t.Empty, x.ExternalToolsResult,
    "Bound: the tools the session's rules offer now.",
    # Reads only, but answered where the calls it lists will run: a daemon that lost the
    # tree says so here rather than at the first call.
    writes=BOUND)
EXTERNAL_CHECK_MAIL: Final = Method(
    "external.check_mail", t.Empty, x.ExternalCheckMailResult,
    "Bound: claim the session's deliverable mail, as envelopes.",
    writes=BOUND)
EXTERNAL_CALL: Final = Method(
    "external.call", x.ExternalCallParams, x.ExternalCallResult,
    "Bound: run send_message or get_subagent_result as the session.",
    writes=BOUND)
PLUGIN_PRODUCER_SEND: Final = Method(
    "plugin/producer/send", t.ProducerSendParams, t.ProducerAccepted,
    "Plugin-owned mail into any session, at most 256 KiB of UTF-8.",
    writes="session_id")

# Server -> client notifications: their params types (a notification has no result).
EVENTS_EVENT: Final = Method(
    "events/event", t.EventNotification, t.Empty, "The next event of a subscription.")
EXTERNAL_MAIL: Final = Method(
    "external/mail", x.ExternalMailNotification, t.Empty,
    "To connections bound to an external session: it has new mail.")
PLUGIN_EVENT: Final = Method(
    "plugin/event", t.PluginEventNotification, t.Empty,
    "Every durable event, to plugin connections that asked for them.")

# Server -> client requests (a plugin connection answers them).
PLUGIN_TOOL_BEFORE_CALL: Final = Method(
    "plugin/tool_before_call", t.ToolGateParams, t.ToolGateResult,
    "Asked of gating plugins before every tool call; false refuses it.")


def _table(*methods: Method[Any, Any]) -> dict[str, Method[Any, Any]]:
    table = {m.name: m for m in methods}
    assert len(table) == len(methods), "two constants share a wire name"
    return table


# The tables, by wire name, in the order the bindings list them.
METHODS: Final = _table(
    AUTH_CHALLENGE, AUTH_PROVE, INITIALIZE, SHUTDOWN, SESSION_CREATE, SESSION_GET,
    SESSION_LIST, SESSION_DELEGATE, RUN_SUBMIT, RUN_STEER, RUN_CANCEL, RUN_GET, RUN_LIST,
    MESSAGE_GET, MESSAGE_LIST, MESSAGE_STATUS, MESSAGE_CANCEL, TOOL_CALL, APPROVAL_LIST,
    APPROVAL_ANSWER, EVENTS_SUBSCRIBE, EVENTS_READ, EVENTS_UNSUBSCRIBE, PLUGIN_PRODUCER_SEND,
    EXTERNAL_ATTACH,
    EXTERNAL_TOKENS_ISSUE, EXTERNAL_TOKENS_LIST, EXTERNAL_TOKENS_REVOKE, EXTERNAL_BIND,
    EXTERNAL_TOOLS, EXTERNAL_CHECK_MAIL, EXTERNAL_CALL)
NOTIFICATIONS: Final = _table(EVENTS_EVENT, PLUGIN_EVENT, EXTERNAL_MAIL)
SERVER_REQUESTS: Final = _table(PLUGIN_TOOL_BEFORE_CALL)

# The list methods, which answer in pages (``after``, ``limit`` and ``next``): the field of
# each one's result that holds the page's items.
PAGED: Final = {m.name: m.items for m in METHODS.values() if isinstance(m, Paged)}


class ParamsError(Exception):
    """The params do not match the method's params type; the message names the path."""


def decode_params(method: Method[P, Any], raw: dict[str, Any]) -> P:
    try:
        return msgspec.convert(raw, method.params)
    except msgspec.ValidationError as exc:
        raise ParamsError(_in_range(method.params, _in_words(str(exc)))) from None


def _in_words(message: str) -> str:
    """msgspec's message with each pattern it names replaced by what the pattern asks for."""
    for pattern, words in PATTERNS.items():
        message = message.replace(f"`str` matching regex {pattern!r}", words)
    return message


_BROKEN_BOUND = re.compile(r"Expected `int` [<>]= -?\d+ - at `\$\.(\w+)`")


def _in_range(params: type, message: str) -> str:
    """msgspec names the one bound a number broke; a field bounded on both sides is given its
    whole range instead, so the caller picks a value that passes both at once."""
    broken = _BROKEN_BOUND.fullmatch(message)
    if broken is None:
        return message
    info = msgspec.inspect.type_info(params)
    fields = info.fields if isinstance(info, msgspec.inspect.StructType) else ()
    kind = next((f.type for f in fields if f.encode_name == broken[1]), None)
    if not isinstance(kind, msgspec.inspect.IntType) or kind.ge is None or kind.le is None:
        return message
    return f"Expected `int` from {kind.ge} to {kind.le} - at `$.{broken[1]}`"
