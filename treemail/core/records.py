"""The stored records: sessions, runs, messages, events, send results.

Records are frozen attrs classes; a change is a new record written in a store transaction.
Their ``state`` (and a run's ``status``) fields hold the lifecycle state enums of
``lifecycle``, stepped only through its tables.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from treemail.core.lifecycle import (
    MESSAGE,
    ApprovalState,
    MessageState,
    RequestState,
    RunState,
    SessionState,
)
from treemail.core.permissions import Action, Rules
from treemail.core.results import CallOutcome

__all__ = [
    "AgentSpec",
    "Approval",
    "ApprovalState",
    "Event",
    "GrantScope",
    "IdempotencyKey",
    "Message",
    "Mode",
    "Owner",
    "ProducerKey",
    "RecipientState",
    "Run",
    "SendResult",
    "Session",
    "ToolContext",
]


class Owner(enum.StrEnum):
    """Who produced a message. Only agent mail counts against a recipient's inbox cap."""

    AGENT = "agent"
    DELEGATION = "delegation"
    PLUGIN = "plugin"
    GOAL = "goal"
    USER = "user"


class Mode(enum.StrEnum):
    """Requested delivery: join the in-flight run (steer) or wait for the next run (queue)."""

    STEER = "steer"
    QUEUE = "queue"


class RecipientState(enum.StrEnum):
    """The recipient as the sender found it: running, waiting for a run, or finished.

    These are wire values of the send result, fixed by the contract, not session states:
    two of them happen to share a session state's spelling."""

    RUNNING = "running"
    QUEUED = "queued"
    WAKING_FINISHED = "waking_finished"


@attrs.frozen
class AgentSpec:
    """The part of an agent doc the engine needs: its name, description and message rules."""

    name: str
    description: str = ""
    rules: Rules = attrs.field(factory=Rules)
    # Which agents it may delegate to, by name pattern; None (no rules) means any agent.
    delegate_rules: Rules | None = None
    # The doc's ``receipts: true``: its sessions are offered message_status and
    # cancel_message (opt-in, so a doc without it sees the contract's tools only).
    receipts: bool = False

    def may_delegate(self, agent_name: str) -> bool:
        if self.delegate_rules is None:
            return True
        return self.delegate_rules.decide(agent_name) is Action.ALLOW

    @property
    def delegates(self) -> bool:
        """Whether the delegation tools are shown at all: some agent may be delegated to."""
        return self.delegate_rules is None or self.delegate_rules.visible


# ``SessionState(state)`` and ``RunState(status)`` cost an enum call even for a member: every
# step of a session or run makes a record (see ``_message_state``).
def _session_state(state: str) -> SessionState:
    return state if type(state) is SessionState else SessionState(state)


def _run_state(status: str) -> RunState:
    return status if type(status) is RunState else RunState(status)


@attrs.frozen
class Session:
    """A session of a delegation tree. ``handle`` is None for sessions stored before handles."""

    session_id: str
    root_session_id: str
    parent_session_id: str | None
    agent: AgentSpec
    handle: str | None
    ordinal: int
    # Converted, so that a record built from a plain state name still has the enum type.
    state: SessionState = attrs.field(default=SessionState.IDLE, converter=_session_state)
    run_id: str | None = None
    # False once the branch that created it was reverted: reachable by UUID, not by handle.
    live: bool = True
    # What the delegating model said this child does (delegate_subagent's ``description``):
    # it tells two workers of one agent doc apart. Empty for roots and when none was given.
    description: str = ""

    @property
    def summary(self) -> str:
        """How the session is described to its peers: its own description, else its doc's."""
        return self.description or self.agent.description

    @property
    def reference(self) -> str:
        """How this session is named to models: its handle, or its UUID when it has none."""
        return self.handle if self.handle is not None else self.session_id


# Enum members read once, here: under Python 3.11 a member read through its class goes
# through ``EnumType.__getattr__``'s hook, about ten times the cost of reading a global
# (see ``runs``).
_NO_REQUEST = RequestState.NO_REQUEST
_REQUEST_OPEN = RequestState.REQUEST_OPEN
@attrs.frozen
class Run:
    """One run of a session. ``base_hop`` is the highest hop among agent mail it consumed."""

    run_id: str
    session_id: str
    number: int
    # Stored as ``status`` (not ``state``) so that runs written before RunLifecycle still read.
    status: RunState = attrs.field(default=RunState.QUEUED, converter=_run_state)
    base_hop: int = 0
    open_request: str | None = None

    @property
    def request_state(self) -> RequestState:
        """Where the run's model request is in ``RequestLifecycle``: derived, not stored."""
        if self.open_request is None:
            return _NO_REQUEST
        return _REQUEST_OPEN


def _message_state(state: str) -> MessageState:
    # ``MessageState(state)`` costs two calls even for a MessageState: every send makes one.
    return state if type(state) is MessageState else MessageState(state)


@attrs.frozen
class Message:
    """A producer message held by its recipient.

    ``run_id`` binds pending mail to the run it is destined for; ``None`` means the next run
    the recipient starts. ``request_id`` is set while the message is claimed.
    """

    message_id: str
    recipient: str
    sender: str | None
    owner: Owner
    body: str
    mode: Mode
    hop: int
    seq: int
    state: MessageState = attrs.field(default=MESSAGE.initial, converter=_message_state)
    run_id: str | None = None
    request_id: str | None = None
    reason: str | None = None
    # Expiry's clock (``expiry``), None while expiry is off: in an unclaimed state the instant
    # from which the message's age counts, while claimed the age it had reached.
    aged: float | None = None

    @property
    def pending(self) -> bool:
        """Unacknowledged: in every state but consumed and discarded."""
        return self.state.pending


@attrs.frozen
class Event:
    """One entry of a session's append-only event log; ``seq`` counts from 1 per session."""

    session_id: str
    seq: int
    kind: str
    data: Mapping[str, object]


@attrs.frozen
class ToolContext:
    """The executing tool call. The sender of a send is always this, never an argument."""

    session_id: str
    run_id: str
    tool_call_id: str
    # Where a retry of the call finds its first result: under its run, unless the caller
    # names a wider slot. An external session's calls are kept under one slot of the
    # session, since its runs are the client's turns, which a daemon restart (or another
    # check_mail) ends between a call and its retry.
    replay_slot: str | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class IdempotencyKey:
    session_id: str
    run_id: str
    tool_call_id: str

    @classmethod
    def of(cls, ctx: ToolContext) -> IdempotencyKey:
        return cls(ctx.session_id, ctx.replay_slot or ctx.run_id, ctx.tool_call_id)


@attrs.frozen
class ProducerKey:
    """The idempotency key of mail from outside the agents (``run.submit``, ``run.steer``,
    plugin mail): the client's ``key``, scoped by the recipient session and the producer's
    kind, so equal keys of two sessions, or of the user and a plugin, never meet."""

    session_id: str
    owner: Owner
    key: str


class GrantScope(enum.StrEnum):
    """How far the user's approval of a held call reaches: that call alone, every call of
    the sender session, or every call of its tree (to peers of the same label)."""

    ONCE = "once"
    SESSION = "session"
    TREE = "tree"


@attrs.frozen
class Approval:
    """A tool call held by an ``ask`` rule until the user answers; survives restarts.

    Its id is the tool context itself, so asking twice for one call finds one approval.
    ``outcome`` is what the call produced once answered."""

    approval_id: str
    session_id: str
    run_id: str
    tool_call_id: str
    tool: str
    arguments: Mapping[str, object]
    label: str
    state: ApprovalState = ApprovalState.PENDING
    scope: str | None = None
    outcome: CallOutcome | None = None

    @property
    def context(self) -> ToolContext:
        return ToolContext(self.session_id, self.run_id, self.tool_call_id)

    @staticmethod
    def id_for(ctx: ToolContext) -> str:
        return f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}"


@attrs.frozen
class SendResult:
    """What a successful send returns: durably accepted, not yet seen by the recipient."""

    message_id: str
    mode: Mode
    recipient_state: RecipientState
    # The digest of the call's arguments, stored with the idempotency key so a reused tool
    # call id with other arguments is told apart from a retry. Not part of the result.
    digest: str | None = attrs.field(default=None, eq=False, repr=False)

    def as_tool_result(self) -> dict[str, str]:
        return {
            "message_id": self.message_id,
            "mode": self.mode.value,
            "recipient_state": self.recipient_state.value,
        }
