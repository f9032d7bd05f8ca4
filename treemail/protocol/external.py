"""Protocol 19's wire types for external sessions (an MCP client's session of a tree).

Two kinds of connection use them. The user's (any connection that is not bound) attaches
external sessions and manages their tokens. A connection that sent ``external.bind`` with a
session's token is bound to that one session for the rest of its life: it may call only the
session methods below (``external.tools``, ``external.check_mail``, ``external.call``), each
acting as that session, and nothing else; the daemon, not its client, holds the binding.
"""

from __future__ import annotations

from typing import Any

from treemail.protocol.structs import Params, Result
from treemail.protocol.types import ProducerAccepted, SessionView

__all__ = [
    "ExternalAttachParams",
    "ExternalAttachResult",
    "ExternalBindParams",
    "ExternalBindResult",
    "ExternalCallParams",
    "ExternalCallResult",
    "ExternalCheckMailResult",
    "ExternalMail",
    "ExternalMailNotification",
    "ExternalTokenIssueParams",
    "ExternalTokenIssueResult",
    "ExternalTokenRevokeParams",
    "ExternalTokenView",
    "ExternalTokensListParams",
    "ExternalTokensListResult",
    "ExternalToolsResult",
]


class ExternalAttachParams(Params):
    """A new external session: a child of ``parent_session_id`` that runs no model, with
    ``agent``'s doc for its rules; ``description`` is shown to its tree peers."""

    parent_session_id: str
    agent: str
    description: str = ""


class ExternalAttachResult(Result):
    """The session, and the one token that binds a client to it (shown once: the daemon
    keeps only its digest); ``token_id`` names the token in listings and revocations."""

    session: SessionView
    token: str
    token_id: str


class ExternalTokenIssueParams(Params):
    """Another token for an existing external session (a lost one is revoked apart)."""

    session_id: str


class ExternalTokenIssueResult(Result):
    token: str
    token_id: str


class ExternalTokensListParams(Params):
    """The tokens of one session, or of every external session."""

    session_id: str | None = None


class ExternalTokenView(Result):
    token_id: str
    session_id: str
    root_session_id: str
    handle: str | None
    agent: str
    revoked: bool


class ExternalTokensListResult(Result):
    tokens: list[ExternalTokenView]


class ExternalTokenRevokeParams(Params):
    token_id: str


class ExternalBindParams(Params):
    """Bind this connection to the session ``token`` names, for the connection's life."""

    token: str


class ExternalBindResult(Result):
    """The bound session and the tools its rules offer now."""

    session: SessionView
    tools: list[str]


class ExternalToolsResult(Result):
    """The tools the bound session's rules offer now (rules are read at each call)."""

    tools: list[str]


class ExternalMail(Result):
    """A message as the client's model reads it: ``text`` is its envelope, rendered by the
    engine (``<agent_message from="...">`` and the rest, spec/envelope.md)."""

    message_id: str
    owner: str
    text: str


class ExternalCheckMailResult(Result):
    """The mail this call claimed: consumed by the connection's next session call, released
    if the connection ends first."""

    messages: list[ExternalMail]


class ExternalCallParams(Params):
    """Run a tool as the bound session. ``tool_call_id`` is the caller's id of the call: a
    retry with the same id and arguments is answered with the first result."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]


class ExternalCallResult(Result):
    """The tool result, as JSON text (an error is a result too, with its stable code);
    ``accepted`` is the mail a send_message put in the recipient's log; ``approval_id`` when
    an ``ask`` rule holds the call until the user answers."""

    content: str
    is_error: bool
    approval_id: str | None = None
    accepted: ProducerAccepted | None = None


class ExternalMailNotification(Result):
    """``external/mail``: the bound session has new mail; ``external.check_mail`` reads it."""

    session_id: str
