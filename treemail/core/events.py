"""Theory of operation: the event log's vocabulary, declared once.

Every kind of entry a session's log holds is an ``EventKind`` with one frozen attrs payload
class. Writers build a payload and ``record`` it; readers ``read`` an ``Event`` back into its
payload. No other module spells a kind (``tests/unit/test_event_kinds.py`` checks the AST).

The store keeps each entry as (kind, plain JSON data), so the log carries no schema version
and ``read`` is best-effort: a kind this version does not know, a field it does not know, a
missing required field or a value of the wrong type reads back as an ``UnknownEvent`` holding
the raw kind and data and the reason. Readers show it and skip it; reading never raises, so a
log written by an older or a newer treemail stays readable. A field added to a payload later
therefore needs a default, or every older entry of its kind reads as unknown.

One field table per class drives ``record``, ``read`` and ``schema`` alike, so the JSON Schema
of ``spec/events.json`` (and of the daemon's bindings) is the shape ``record`` writes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeAlias, assert_never

import attrs

from treemail.core.lifecycle import SessionTrigger
from treemail.core.owners import AgentOwner, MailOwner, owner_from, owner_of
from treemail.core.records import ApprovalState, Event, Message, Mode, Owner, Run
from treemail.core.results import CallOutcome
from treemail.core.shapes import CODEC, KEY, Codec, Unfit, enum_codec, shape
from treemail.core.store import WriteTxn

__all__ = [
    "MESSAGE_PAYLOADS",
    "PAYLOADS",
    "ApprovalAnswered",
    "ApprovalRequested",
    "DelegationCompleted",
    "EventKind",
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
    "encode",
    "message_kind",
    "message_payload",
    "message_state",
    "read",
    "record",
    "run_kind",
    "run_payload",
    "schema",
    "schemas",
    "typed",
]


class EventKind(enum.StrEnum):
    """The kinds of entry a session's event log holds, by their stored name."""

    SESSION_CREATED = "SessionCreated"
    SESSION_REVERTED = "SessionReverted"
    SESSION_FORKED = "SessionForked"
    RUN_QUEUED = "RunQueued"
    RUN_STARTED = "RunStarted"
    RUN_FINISHED = "RunFinished"
    RUN_INTERRUPTED = "RunInterrupted"
    REQUEST_BEGUN = "RequestBegun"
    REQUEST_COMMITTED = "RequestCommitted"
    REQUEST_ABORTED = "RequestAborted"
    MODEL_OUTPUT = "ModelOutput"
    TOOL_RESULTS = "ToolResults"
    DELEGATION_COMPLETED = "DelegationCompleted"
    APPROVAL_REQUESTED = "ApprovalRequested"
    APPROVAL_ANSWERED = "ApprovalAnswered"
    PRODUCER_MESSAGE_ACCEPTED = "ProducerMessageAccepted"
    PRODUCER_MESSAGE_ADMITTED = "ProducerMessageAdmitted"
    PRODUCER_MESSAGE_CLAIMED = "ProducerMessageClaimed"
    PRODUCER_MESSAGE_RELEASED = "ProducerMessageReleased"
    PRODUCER_MESSAGE_CONSUMED = "ProducerMessageConsumed"
    PRODUCER_MESSAGE_DISCARDED = "ProducerMessageDiscarded"
    EXTERNAL_TOKEN_ISSUED = "ExternalTokenIssued"
    EXTERNAL_TOKEN_REVOKED = "ExternalTokenRevoked"


# Message kinds are named after the lifecycle state they record entry into.
_MESSAGE_PREFIX = "ProducerMessage"
# By state, looked up on every message step instead of spelling the kind's name each time.
_MESSAGE_KINDS = {kind.value.removeprefix(_MESSAGE_PREFIX).lower(): kind
                  for kind in EventKind if kind.value.startswith(_MESSAGE_PREFIX)}


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
_CLASSES: Mapping[str, type[Payload]] = {cls.KIND.value: cls for cls in PAYLOADS}
if set(_CLASSES) != {kind.value for kind in EventKind}:  # one class per kind, no more
    raise AssertionError(f"events: kinds without one class: {set(EventKind) ^ set(_CLASSES)}")


@attrs.frozen
class UnknownEvent:
    """An entry this version cannot read: an unknown kind, or data that does not fit its kind's
    payload (an unknown or missing field, a value of the wrong type). Show it, then skip it."""

    kind: str
    data: Mapping[str, object]
    reason: str


# -- the typed boundary ----------------------------------------------------------------------------


def record(tx: WriteTxn, session_id: str, payload: Payload) -> Event:
    """Append ``payload`` to the session's log (and the feed)."""
    return tx.append(session_id, payload.KIND.value, encode(payload))


def encode(payload: Payload) -> dict[str, object]:
    """The stored data of ``payload``: plain JSON values, keyed as ``schema`` says."""
    return shape(type(payload)).encode(payload)


def read(event: Event) -> Payload | UnknownEvent:
    """The typed payload of a stored event, or an ``UnknownEvent``; never raises."""
    cls = _CLASSES.get(event.kind)
    if cls is None:
        return UnknownEvent(event.kind, event.data, f"unknown event kind {event.kind!r}")
    try:
        payload: Payload = shape(cls).decode(event.data)
    except Unfit as exc:
        return UnknownEvent(event.kind, event.data, str(exc))
    return payload


def typed(events: Iterable[Event]) -> Iterator[tuple[Event, Payload | UnknownEvent]]:
    """Each event with its payload, in order."""
    return ((event, read(event)) for event in events)


def message_kind(state: str) -> EventKind:
    """The kind recording a message's entry into lifecycle state ``state``."""
    return _MESSAGE_KINDS.get(state) or EventKind(_MESSAGE_PREFIX + state.capitalize())


def message_state(payload: MessagePayload) -> str:
    """The lifecycle state a message event records entry into."""
    return payload.KIND.value.removeprefix(_MESSAGE_PREFIX).lower()


def message_payload(message: Message) -> MessagePayload:
    """The event recording ``message``'s entry into its current state."""
    owner, kind = owner_of(message), message_kind(message.state)
    common = (message.message_id, owner, message.sender, message.run_id, message.request_id)
    if kind is EventKind.PRODUCER_MESSAGE_ACCEPTED:
        hop = message.hop if isinstance(owner, AgentOwner) else None
        return ProducerMessageAccepted(*common, message.mode, hop, message.body)
    if kind is EventKind.PRODUCER_MESSAGE_DISCARDED:
        return ProducerMessageDiscarded(*common, message.reason or "")
    cls = _CLASSES[kind.value]
    assert cls in (ProducerMessageAdmitted, ProducerMessageClaimed, ProducerMessageReleased,
                   ProducerMessageConsumed)
    built: MessagePayload = cls(*common)
    return built


def _run_class(trigger: SessionTrigger) -> type[RunPayload]:
    """The payload recording session trigger ``trigger``; mypy checks every trigger has one."""
    match trigger:
        case SessionTrigger.ENQUEUE:
            return RunQueued
        case SessionTrigger.START:
            return RunStarted
        case SessionTrigger.FINISH:
            return RunFinished
        case SessionTrigger.INTERRUPT:
            return RunInterrupted
        case _:
            assert_never(trigger)


def run_kind(trigger: SessionTrigger) -> EventKind:
    """The kind recording session trigger ``trigger`` (enqueue, start, ...)."""
    return _run_class(trigger).KIND


def run_payload(trigger: SessionTrigger, run: Run, reason: str | None,
                fault: Fault | None = None) -> RunPayload:
    cls = _run_class(trigger)
    if cls is RunStarted:
        return RunStarted(run.run_id, run.number)
    if reason is None:
        raise ValueError(f"a {cls.KIND.value} event needs a reason")
    if cls is RunInterrupted and fault is not None:
        return RunInterrupted(run.run_id, run.number, reason, fault.status, fault.endpoint,
                              fault.hint)
    return cls(run.run_id, run.number, reason)  # type: ignore[call-arg]


def schema(cls: type[Payload]) -> dict[str, object]:
    """The JSON Schema of the stored data of payload class ``cls``."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": cls.KIND.value,
        "description": _doc(cls),
        **shape(cls).schema,
    }


def schemas() -> dict[str, dict[str, object]]:
    """Every payload's JSON Schema, by kind, in declaration order."""
    return {cls.KIND.value: schema(cls) for cls in PAYLOADS}


def _doc(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split())
