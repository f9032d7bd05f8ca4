"""Protocol 19's method table: each method's name, params type, result type and summary.

The server dispatches through this table, the client encodes through it, and the bindings
are generated from it, so a method exists on the wire exactly when it is listed here.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import msgspec

from treemail.protocol import external as x
from treemail.protocol import types as t

__all__ = [
    "METHODS",
    "NOTIFICATIONS",
    "PAGED",
    "PROTOCOL_VERSION",
    "SERVER_REQUESTS",
    "Method",
    "ParamsError",
    "decode_params",
]

PROTOCOL_VERSION: Final = 19


class Method(NamedTuple):
    name: str
    params: type[msgspec.Struct]
    result: type[msgspec.Struct]
    summary: str


def _table(*methods: Method) -> dict[str, Method]:
    return {m.name: m for m in methods}


METHODS: Final[dict[str, Method]] = _table(
    Method("auth.challenge", t.AuthChallengeParams, t.AuthChallengeResult,
           "TCP only, the first request: the server proves it holds the token."),
    Method("auth.prove", t.AuthProveParams, t.AuthProveResult,
           "TCP only, the second request: the client proves it holds the token."),
    Method("initialize", t.InitializeParams, t.InitializeResult,
           "The handshake; every other request before it is refused."),
    Method("shutdown", t.Empty, t.ShutdownResult,
           "Stop the daemon in order: new sends are refused, runs stop at a boundary."),
    Method("session.create", t.SessionCreateParams, t.SessionView,
           "A new tree whose root runs an agent, known by name or given as an agent doc."),
    Method("session.get", t.SessionGetParams, t.SessionView, "One session."),
    Method("session.list", t.SessionListParams, t.SessionListResult,
           "A page of the sessions, or of one tree's, in creation order."),
    Method("session.delegate", t.SessionDelegateParams, t.SessionView,
           "A child of a session in its tree; the task arrives as delegation mail."),
    Method("run.submit", t.RunSubmitParams, t.ProducerAccepted,
           "User input for the session's next run (queue mode); it wakes the session."),
    Method("run.steer", t.RunSteerParams, t.ProducerAccepted,
           "User steering: joins the in-flight run at its next safe boundary."),
    Method("run.get", t.RunGetParams, t.RunView, "One run."),
    Method("run.list", t.RunListParams, t.RunListResult, "A page of a session's runs, in order."),
    Method("message.get", t.MessageGetParams, t.MessageReceipt,
           "A receipt: the message's lifecycle state and its history."),
    Method("message.list", t.MessageListParams, t.MessageListResult,
           "A page of the mail a session received, or of its pending mail."),
    Method("tool.call", t.ToolCallParams, t.ToolCallResult,
           "Run a tool as the session's in-flight run (the daemon as tool executor)."),
    Method("approval.list", t.ApprovalListParams, t.ApprovalListResult,
           "Tool calls held by ask rules."),
    Method("approval.answer", t.ApprovalAnswerParams, t.ApprovalView,
           "Approve (scope once, session or tree) or deny a held call."),
    Method("events.subscribe", t.EventsSubscribeParams, t.EventsSubscribeResult,
           "Replay the feed after a number, then stream it live: no gap, no duplicate."),
    Method("events.read", t.EventsReadParams, t.EventsReadResult,
           "One page of the feed after a number, optionally for one session."),
    Method("events.unsubscribe", t.EventsUnsubscribeParams, t.EventsUnsubscribeResult,
           "End a subscription."),
    Method("plugin/producer/send", t.ProducerSendParams, t.ProducerAccepted,
           "Plugin-owned mail into any session, at most 256 KiB of UTF-8."),
    Method("external.attach", x.ExternalAttachParams, x.ExternalAttachResult,
           "An external session (an MCP client drives it) in a tree, and its token."),
    Method("external.tokens.issue", x.ExternalTokenIssueParams, x.ExternalTokenIssueResult,
           "Another token for an external session."),
    Method("external.tokens.list", x.ExternalTokensListParams, x.ExternalTokensListResult,
           "The tokens issued, live and revoked, by id (never the tokens)."),
    Method("external.tokens.revoke", x.ExternalTokenRevokeParams, x.ExternalTokenView,
           "Revoke a token: connections bound by it are refused from their next call."),
    Method("external.bind", x.ExternalBindParams, x.ExternalBindResult,
           "Bind this connection to the session a token names, for the connection's life."),
    Method("external.tools", t.Empty, x.ExternalToolsResult,
           "Bound: the tools the session's rules offer now."),
    Method("external.check_mail", t.Empty, x.ExternalCheckMailResult,
           "Bound: claim the session's deliverable mail, as envelopes."),
    Method("external.call", x.ExternalCallParams, x.ExternalCallResult,
           "Bound: run send_message or get_subagent_result as the session."),
)

# The list methods, which answer in pages (``after``, ``limit`` and ``next``): the field of
# each one's result that holds the page's items.
PAGED: Final[dict[str, str]] = {
    "session.list": "sessions", "run.list": "runs", "message.list": "messages"}

# Server -> client notifications, by method name: their params types.
NOTIFICATIONS: Final[dict[str, Method]] = _table(
    Method("events/event", t.EventNotification, t.Empty, "The next event of a subscription."),
    Method("plugin/event", t.PluginEventNotification, t.Empty,
           "Every durable event, to plugin connections that asked for them."),
    Method("external/mail", x.ExternalMailNotification, t.Empty,
           "To connections bound to an external session: it has new mail."),
)

# Server -> client requests (a plugin connection answers them).
SERVER_REQUESTS: Final[dict[str, Method]] = _table(
    Method("plugin/tool_before_call", t.ToolGateParams, t.ToolGateResult,
           "Asked of gating plugins before every tool call; false refuses it."),
)


class ParamsError(Exception):
    """The params do not match the method's params type; the message names the path."""


def decode_params(method: Method, raw: dict[str, Any]) -> msgspec.Struct:
    try:
        return msgspec.convert(raw, method.params)
    except msgspec.ValidationError as exc:
        raise ParamsError(str(exc)) from None
