"""Protocol 19's wire types: every method's params and result, as msgspec Structs.

msgspec, not attrs: one declaration gives fast strict decoding (a wrong type or an unknown
field is a ``ValidationError`` naming the path, which the server answers as invalid params)
and its JSON Schema (``msgspec.json.schema_components``), from which the TypeScript bindings
are generated too. Params forbid unknown fields; results are read leniently by clients, so
an added result field is not a breaking change for them (``compat.py`` classifies it as
additive). A state is its core enum, so the schema lists its values; the wire carries the
value, as before. Bounds (``Meta``) and ``EXACTLY_ONE_OF`` groups are checked by decoding
and stated by the schema alike.

The bases and paging bounds (``structs``) and the connection's types (``connection``: the TCP
proof, ``initialize``, ``shutdown``) live beside this module, which re-exports them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.core.records import ApprovalState, Mode, Owner, RecipientState
from treemail.protocol.connection import (
    AuthChallengeParams,
    AuthChallengeResult,
    AuthProveParams,
    AuthProveResult,
    ClientCapabilities,
    ClientInfo,
    InitializeParams,
    InitializeResult,
    ServerCapabilities,
    ServerInfo,
    ShutdownResult,
)
from treemail.protocol.forward import Unknown
from treemail.protocol.rules import IdempotencyKey, MailText
from treemail.protocol.structs import (
    PAGE_BODY_BYTES,
    PAGE_LIMIT,
    Cursor,
    Empty,
    GroupedParams,
    Limit,
    Params,
    Result,
    Scope,
)

__all__ = [
    "PAGE_BODY_BYTES",
    "PAGE_LIMIT",
    "ApprovalAnswerParams",
    "ApprovalListParams",
    "ApprovalListResult",
    "ApprovalOutcome",
    "ApprovalView",
    "AuthChallengeParams",
    "AuthChallengeResult",
    "AuthProveParams",
    "AuthProveResult",
    "ClientCapabilities",
    "ClientInfo",
    "Empty",
    "EventNotification",
    "EventView",
    "EventsReadParams",
    "EventsReadResult",
    "EventsSubscribeParams",
    "EventsSubscribeResult",
    "EventsUnsubscribeParams",
    "EventsUnsubscribeResult",
    "InitializeParams",
    "InitializeResult",
    "MessageGetParams",
    "MessageHistoryEntry",
    "MessageListParams",
    "MessageListResult",
    "MessageReceipt",
    "MessageView",
    "PluginEventNotification",
    "ProducerAccepted",
    "ProducerSendParams",
    "RunCancelParams",
    "RunCancelResult",
    "RunGetParams",
    "RunListParams",
    "RunListResult",
    "RunSteerParams",
    "RunSubmitParams",
    "RunView",
    "ServerCapabilities",
    "ServerInfo",
    "SessionCreateParams",
    "SessionDelegateParams",
    "SessionGetParams",
    "SessionListParams",
    "SessionListResult",
    "SessionView",
    "ShutdownResult",
    "ToolCallParams",
    "ToolCallResult",
    "ToolGateParams",
    "ToolGateResult",
]


# -- sessions ----------------------------------------------------------------------------


class SessionView(Result):
    session_id: str
    root_session_id: str
    parent_session_id: str | None
    handle: str | None
    agent: str
    state: SessionState | Unknown
    run_id: str | None
    live: bool
    # Whether the session's actor is in the daemon's memory now (an idle one is evicted);
    # said by session.list, false elsewhere.
    resident: bool = False


class SessionCreateParams(GroupedParams):
    """A new tree whose root runs ``agent`` (a known agent's name), or the agent that
    ``agent_doc`` (an agent doc's full text: YAML frontmatter and prompt) defines.
    ``agent_docs`` define more agents first, for the tree to delegate to; an agent doc
    replaces a daemon agent of the same name, except one a file of the data directory's
    ``agents/`` defines (``daemon:agent_defined_by_file``). ``task``, when given, is the
    root's first user input (as ``run.submit`` in queue mode), accepted in the same store
    transaction as the session: a refused task leaves no session behind."""

    EXACTLY_ONE_OF = (("agent", "agent_doc"),)

    agent: str | None = None
    agent_doc: str | None = None
    agent_docs: list[str] = msgspec.field(default_factory=list)
    task: MailText | None = None


class SessionDelegateParams(Params):
    parent_session_id: str
    agent: str
    task: MailText


class SessionGetParams(Params):
    session_id: str


class SessionListParams(Params):
    """A page of the sessions (of one tree when ``root_session_id`` is given), in creation
    order: at most ``limit`` (1 to 256, default 256) after the cursor ``after`` (0: from the
    first; else a ``next`` a previous page gave)."""

    root_session_id: str | None = None
    after: Cursor = 0
    limit: Limit = PAGE_LIMIT


class SessionListResult(Result):
    """``next``: the ``after`` of the next page; null when this page is the last."""

    sessions: list[SessionView]
    next: int | None


# -- runs --------------------------------------------------------------------------------


class RunView(Result):
    run_id: str
    session_id: str
    number: int
    status: RunState | Unknown
    base_hop: int


class RunGetParams(Params):
    run_id: str


class RunListParams(Params):
    """A page of a session's runs, in order: at most ``limit`` (1 to 256, default 256) after
    the cursor ``after`` (0: from the first; else a ``next`` a previous page gave)."""

    session_id: str
    after: Cursor = 0
    limit: Limit = PAGE_LIMIT


class RunListResult(Result):
    """``next``: the ``after`` of the next page; null when this page is the last."""

    runs: list[RunView]
    next: int | None


class RunSubmitParams(Params):
    """User input: mail for the session's next run (queue mode), which wakes it.

    ``idempotency_key``: optional, the client's key for this mail (printable, 1 to 256
    bytes of UTF-8; a fresh UUID per mail is a good key). A retry with the same key and the
    same mail is answered with the first accept, and accepts nothing; the same key with other
    mail is refused (``producer:idempotency_conflict``). Keys are scoped by session and
    producer kind (user or plugin), and kept as long as the store."""

    session_id: str
    text: MailText
    idempotency_key: IdempotencyKey | None = None


class RunSteerParams(Params):
    """User steering: joins the session's in-flight run at its next safe boundary; with no
    run in flight it waits for the next run, like ``run.submit``. ``idempotency_key``: as
    for ``run.submit`` (one key space for the user's mail to a session: a key used by
    ``run.submit`` and then by ``run.steer`` is other mail, and refused)."""

    session_id: str
    text: MailText
    idempotency_key: IdempotencyKey | None = None


class RunCancelParams(Params):
    """Cancel the session's run in flight (queued or running), as its user: the run ends
    interrupted with the reason "cancelled by user", mail it had claimed is released, and the
    session stays idle until new input. A delegated session's parent is told, as for any
    interrupted run."""

    session_id: str


class RunCancelResult(Result):
    """The run that was cancelled, as it ended."""

    run: RunView
    session: SessionView


class ProducerAccepted(Result):
    """Mail durably accepted (``ProducerMessageAccepted``). ``agent_hop`` is set for agent
    mail only: internal routing data, never shown in the envelope a model reads."""

    message_id: str
    session_id: str
    owner: Owner | Unknown
    mode: Mode | Unknown
    recipient_state: RecipientState | Unknown
    agent_hop: int | None = None


# -- messages ----------------------------------------------------------------------------


class MessageView(Result):
    message_id: str
    recipient: str
    sender: str | None
    owner: Owner | Unknown
    mode: Mode | Unknown
    state: MessageState | Unknown
    body: str
    run_id: str | None
    reason: str | None


class MessageListParams(Params):
    """A page of the mail a session received (only its pending mail with ``pending_only``),
    in acceptance order: at most ``limit`` messages (1 to 256, default 256) and about 1 MiB
    of bodies (at least one message), after the cursor ``after`` (0: from the first; else a
    ``next`` a previous page gave)."""

    session_id: str
    pending_only: bool = False
    after: Cursor = 0
    limit: Limit = PAGE_LIMIT


class MessageListResult(Result):
    """``next``: the ``after`` of the next page; null when this page is the last."""

    messages: list[MessageView]
    next: int | None


class MessageGetParams(Params):
    message_id: str


class MessageHistoryEntry(Result):
    """One lifecycle step of a message, as its recipient's log recorded it."""

    seq: int
    kind: str
    run_id: str | None = None
    request_id: str | None = None
    reason: str | None = None


class MessageReceipt(Result):
    message: MessageView
    history: list[MessageHistoryEntry]


# -- tools and approvals ---------------------------------------------------------------


class ToolCallParams(Params):
    """Run a tool as the session's in-flight run: the daemon executes, the caller's own model
    asked. ``tool_call_id`` is the caller's id of the call (a retry with the same id and
    arguments is answered with the first result)."""

    session_id: str
    tool_call_id: str
    name: str
    arguments: dict[str, Any]


class ToolCallResult(Result):
    """The tool result the model should see (JSON text); ``approval_id`` when an ``ask`` rule
    holds the call until ``approval.answer``. ``accepted``: the mail a ``send_message`` call
    put in the recipient's log, as the daemon records it (with its internal ``agent_hop``,
    which the tool result the model sees leaves out)."""

    content: str
    approval_id: str | None = None
    accepted: ProducerAccepted | None = None


class ApprovalOutcome(Result):
    """What an answered call produced, in the shape the ``ApprovalAnswered`` event records
    it: the result's fields, or the error's ``error`` code and ``message``."""

    result: dict[str, str] | None = None
    error: str | None = None
    message: str | None = None


class ApprovalView(Result):
    """A held tool call; ``outcome``, once answered, is what the call produced."""

    approval_id: str
    session_id: str
    run_id: str
    tool_call_id: str
    tool: str
    arguments: dict[str, Any]
    label: str
    state: ApprovalState | Unknown
    scope: str | None
    outcome: ApprovalOutcome | None


class ApprovalListParams(Params):
    pending_only: bool = True


class ApprovalListResult(Result):
    approvals: list[ApprovalView]


class ApprovalAnswerParams(Params):
    """``reason`` goes with a deny: the agent reads it in the denied call's result."""

    approval_id: str
    approve: bool
    scope: Scope = "once"
    reason: str | None = None


# -- events ------------------------------------------------------------------------------


class EventView(Result):
    """One durable event: ``number`` is its place in the global feed, ``seq`` in its
    session's log."""

    number: int
    session_id: str
    seq: int
    kind: str
    data: dict[str, Any]


class EventsSubscribeParams(Params):
    """Every event after feed number ``after`` (0: from the start), replayed and then live,
    in order, each once; only ``session_id``'s when given."""

    after: Cursor = 0
    session_id: str | None = None


class EventsSubscribeResult(Result):
    subscription_id: str
    head: int


class EventsReadParams(Params):
    """A page of the feed after ``after`` (at most ``limit`` events, 1 to 256, default 256),
    only ``session_id``'s when given; ``next`` is where the next page starts."""

    after: Cursor = 0
    session_id: str | None = None
    limit: Limit = PAGE_LIMIT


class EventsReadResult(Result):
    events: list[EventView]
    next: int
    head: int


class EventsUnsubscribeParams(Params):
    subscription_id: str


class EventsUnsubscribeResult(Result):
    unsubscribed: bool


# -- plugins -----------------------------------------------------------------------------


class ProducerSendParams(Params):
    """Plugin-owned mail into any session; the body is capped at 256 KiB of UTF-8.
    ``idempotency_key``: as for ``run.submit``, in the plugins' key space of the session."""

    session_id: str
    body: MailText
    idempotency_key: IdempotencyKey | None = None


# -- notifications and server requests ----------------------------------------------------


class EventNotification(Result):
    """``events/event``: the next event of a subscription."""

    subscription_id: str
    event: EventView


class PluginEventNotification(Result):
    """``plugin/event``: every durable event, to connections that asked for plugin events."""

    event: EventView


class ToolGateParams(Result):
    """``plugin/tool_before_call``: the server asks a gating plugin before a tool call runs."""

    session_id: str
    agent: str
    tool_call_id: str
    name: str
    arguments: Any


class ToolGateResult(Params):
    """The plugin's verdict: ``allow`` false refuses the call with ``reason``."""

    allow: bool
    reason: str = ""
