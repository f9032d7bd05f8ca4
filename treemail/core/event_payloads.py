"""The event log's payloads: one frozen attrs class per ``EventKind``, with the records they
nest. One field table per class drives ``record``, ``read`` and ``schema`` alike (see
``treemail.core.events``, which re-exports them all).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeAlias

import attrs

from treemail.core.event_kinds import EventKind
from treemail.core.owners import MailOwner, owner_from
from treemail.core.records import ApprovalState, Mode, Owner
from treemail.core.results import CallOutcome
from treemail.core.shapes import CODEC, KEY, Codec, enum_codec

__all__ = [
    "MESSAGE_PAYLOADS",
    "PAYLOADS",
    "ApprovalAnswered",
    "ApprovalRequested",
    "DelegationCompleted",
    "ExternalTokenIssued",
    "ExternalTokenRevoked",
    "Fault",
    "MessagePayload",
    "ModelOutput",
    "Payload",
    "ProducerMessageAccepted",
    "ProducerMessageAdmitted",
    "ProducerMessageClaimed",
    "ProducerMessageConsumed",
    "ProducerMessageDiscarded",
    "ProducerMessageReleased",
    "RecordedCall",
    "RecordedResult",
    "Reply",
    "RequestAborted",
    "RequestBegun",
    "RequestCommitted",
    "RunFinished",
    "RunInterrupted",
    "RunPayload",
    "RunQueued",
    "RunStarted",
    "SessionCreated",
    "SessionForked",
    "SessionReverted",
    "ToolResults",
    "UnknownEvent",
]


# -- nested records ------------------------------------------------------------------------------


@attrs.frozen
class RecordedCall:
    """A tool call of a model reply; ``arguments`` is the call's JSON text as the model sent it."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class RecordedResult:
    """The result a tool call returned to the model, as the text the model read."""

    tool_call_id: str
    content: str


@attrs.frozen
class Reply:
    """A model reply with the mail texts that prompted it, as the actor hands it to the engine."""

    inputs: tuple[str, ...] = ()
    text: str | None = None
    tool_calls: tuple[RecordedCall, ...] = ()


# -- payloads ----------------------------------------------------------------------------------


@attrs.frozen
class SessionCreated:
    """A session was created: a tree root (no parent) or a delegated child."""

    KIND: ClassVar[EventKind] = EventKind.SESSION_CREATED
    root_session_id: str
    parent_session_id: str | None
    handle: str | None
    agent: str
    description: str = ""  # the delegation's own description, when one was given


@attrs.frozen
class SessionReverted:
    """The session became a ghost: the branch created by session ``branch`` was reverted."""

    KIND: ClassVar[EventKind] = EventKind.SESSION_REVERTED
    branch: str


@attrs.frozen
class SessionForked:
    """The session is a fork: its conversation begins with ``source``'s log up to ``upto``."""

    KIND: ClassVar[EventKind] = EventKind.SESSION_FORKED
    source: str = attrs.field(metadata={KEY: "from"})
    upto: int


@attrs.frozen
class _RunEvent:
    run_id: str
    run_number: int


@attrs.frozen
class RunQueued(_RunEvent):
    """A run is wanted and waits to start; ``reason`` says what woke the session."""

    KIND: ClassVar[EventKind] = EventKind.RUN_QUEUED
    reason: str


@attrs.frozen
class RunStarted(_RunEvent):
    """The queued run started; mail waiting for the next run is bound to it."""

    KIND: ClassVar[EventKind] = EventKind.RUN_STARTED


@attrs.frozen
class RunFinished(_RunEvent):
    """The run completed its task."""

    KIND: ClassVar[EventKind] = EventKind.RUN_FINISHED
    reason: str


@attrs.frozen
class Fault:
    """What a failed model call knew: the HTTP ``status`` (None when no answer came), the
    ``endpoint`` it called and a ``hint`` saying what to check. Recorded beside an
    interruption's reason so every reader can show why, not just that, a model failed."""

    status: int | None = None
    endpoint: str | None = None
    hint: str | None = None


@attrs.frozen
class RunInterrupted(_RunEvent):
    """The run was cancelled, failed, or was found dead at restart; ``reason`` says which.
    A model failure adds its HTTP ``status``, the ``endpoint`` called and a ``hint``."""

    KIND: ClassVar[EventKind] = EventKind.RUN_INTERRUPTED
    reason: str
    # Optional, so entries written before these fields existed still read back.
    status: int | None = None
    endpoint: str | None = None
    hint: str | None = None


@attrs.frozen
class RequestBegun:
    """A model request opened at a safe boundary and claimed ``message_ids``."""

    KIND: ClassVar[EventKind] = EventKind.REQUEST_BEGUN
    run_id: str
    request_id: str
    message_ids: tuple[str, ...]


@attrs.frozen
class RequestCommitted:
    """The request committed: the mail it claimed is consumed."""

    KIND: ClassVar[EventKind] = EventKind.REQUEST_COMMITTED
    run_id: str
    request_id: str


@attrs.frozen
class RequestAborted:
    """The request did not commit: the mail it claimed is released."""

    KIND: ClassVar[EventKind] = EventKind.REQUEST_ABORTED
    run_id: str
    request_id: str


@attrs.frozen
class ModelOutput:
    """The model's reply to a committed request, with the mail texts it read."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_OUTPUT
    run_id: str
    request_id: str
    inputs: tuple[str, ...] = ()
    text: str | None = None
    tool_calls: tuple[RecordedCall, ...] = ()


@attrs.frozen
class ToolResults:
    """The results of the tool calls of the run's last reply."""

    KIND: ClassVar[EventKind] = EventKind.TOOL_RESULTS
    run_id: str
    results: tuple[RecordedResult, ...]


@attrs.frozen
class DelegationCompleted:
    """The delegated session reported its result to its parent, as message ``message_id``."""

    KIND: ClassVar[EventKind] = EventKind.DELEGATION_COMPLETED
    message_id: str


@attrs.frozen
class ExternalTokenIssued:
    """A token now binds an MCP client to this external session. The store keeps only its
    SHA-256 ``digest`` (a token is 256 random bits: the digest reveals nothing usable), and
    ``token_id`` (the digest's first 16 hex digits) names it in listings."""

    KIND: ClassVar[EventKind] = EventKind.EXTERNAL_TOKEN_ISSUED
    token_id: str
    digest: str


@attrs.frozen
class ExternalTokenRevoked:
    """The token ``token_id`` of this external session was revoked: it binds no one now."""

    KIND: ClassVar[EventKind] = EventKind.EXTERNAL_TOKEN_REVOKED
    token_id: str


@attrs.frozen
class ApprovalRequested:
    """A tool call is held by an ``ask`` rule until the user answers."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_REQUESTED
    approval_id: str
    tool: str
    label: str
    tool_call_id: str
    run_id: str


@attrs.frozen
class ApprovalAnswered:
    """The user answered a held call; ``outcome`` is the tool result the call produced."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_ANSWERED
    approval_id: str
    state: ApprovalState
    scope: str | None
    outcome: CallOutcome


# Stored flat, as the Owner value; agent mail's session is its ``sender``.
_OWNER = Codec(enum_codec(Owner).decode, lambda owner: owner.OWNER.value,
               enum_codec(Owner).schema)


@attrs.frozen
class _Mail:
    """What every message event records: the message, who produced it, where it is bound."""

    message_id: str
    owner: MailOwner = attrs.field(metadata={CODEC: _OWNER})
    sender: str | None
    run_id: str | None
    request_id: str | None

    @staticmethod
    def _assemble(values: dict[str, Any]) -> None:
        values["owner"] = owner_from(values["owner"], values["sender"])


@attrs.frozen
class ProducerMessageAccepted(_Mail):
    """Mail was durably accepted into the recipient's log: the send has succeeded.
    ``agent_hop`` is the hop count of agent mail (None for any other owner)."""

    KIND: ClassVar[EventKind] = EventKind.PRODUCER_MESSAGE_ACCEPTED
    mode: Mode
    agent_hop: int | None
    body: str


@attrs.frozen
class ProducerMessageAdmitted(_Mail):
    """The mail was taken into pending input, bound to the running run or the next one."""

    KIND: ClassVar[EventKind] = EventKind.PRODUCER_MESSAGE_ADMITTED


@attrs.frozen
class ProducerMessageClaimed(_Mail):
    """The mail was put into the model request ``request_id``."""

    KIND: ClassVar[EventKind] = EventKind.PRODUCER_MESSAGE_CLAIMED


@attrs.frozen
class ProducerMessageReleased(_Mail):
    """The request that claimed the mail did not commit; it waits for the next boundary."""

    KIND: ClassVar[EventKind] = EventKind.PRODUCER_MESSAGE_RELEASED


@attrs.frozen
class ProducerMessageConsumed(_Mail):
    """The request that carried the mail committed: the model read it, exactly once."""

    KIND: ClassVar[EventKind] = EventKind.PRODUCER_MESSAGE_CONSUMED


@attrs.frozen
class ProducerMessageDiscarded(_Mail):
    """The mail was dropped by an explicit decision, for ``reason``."""

    KIND: ClassVar[EventKind] = EventKind.PRODUCER_MESSAGE_DISCARDED
    reason: str


MessagePayload: TypeAlias = (
    ProducerMessageAccepted | ProducerMessageAdmitted | ProducerMessageClaimed
    | ProducerMessageReleased | ProducerMessageConsumed | ProducerMessageDiscarded
)
MESSAGE_PAYLOADS = (
    ProducerMessageAccepted, ProducerMessageAdmitted, ProducerMessageClaimed,
    ProducerMessageReleased, ProducerMessageConsumed, ProducerMessageDiscarded,
)
RunPayload: TypeAlias = RunQueued | RunStarted | RunFinished | RunInterrupted
Payload: TypeAlias = (
    SessionCreated | SessionReverted | SessionForked | RunPayload | RequestBegun
    | RequestCommitted | RequestAborted | ModelOutput | ToolResults | DelegationCompleted
    | ApprovalRequested | ApprovalAnswered | MessagePayload | ExternalTokenIssued
    | ExternalTokenRevoked
)

PAYLOADS: tuple[type[Payload], ...] = (
    SessionCreated, SessionReverted, SessionForked, RunQueued, RunStarted, RunFinished,
    RunInterrupted, RequestBegun, RequestCommitted, RequestAborted, ModelOutput, ToolResults,
    DelegationCompleted, ApprovalRequested, ApprovalAnswered, ProducerMessageAccepted,
    ProducerMessageAdmitted, ProducerMessageClaimed, ProducerMessageReleased,
    ProducerMessageConsumed, ProducerMessageDiscarded, ExternalTokenIssued,
    ExternalTokenRevoked,
)


@attrs.frozen
class UnknownEvent:
    """An entry this version cannot read: an unknown kind, or data that does not fit its kind's
    payload (an unknown or missing field, a value of the wrong type). Show it, then skip it."""

    kind: str
    data: Mapping[str, object]
    reason: str
