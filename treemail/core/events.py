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

The kinds are declared in ``treemail.core.event_kinds``, the payload classes in
``treemail.core.event_payloads``; this module holds the typed boundary and re-exports both,
so readers and writers import everything from here.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from typing import Any, assert_never

import attrs

from treemail.core.event_kinds import MESSAGE_PREFIX, EventKind, message_kind
from treemail.core.event_payloads import (
    MESSAGE_PAYLOADS,
    PAYLOADS,
    ApprovalAnswered,
    ApprovalRequested,
    DelegationCompleted,
    ExternalTokenIssued,
    ExternalTokenRevoked,
    Fault,
    MessagePayload,
    ModelOutput,
    Payload,
    ProducerMessageAccepted,
    ProducerMessageAdmitted,
    ProducerMessageClaimed,
    ProducerMessageConsumed,
    ProducerMessageDiscarded,
    ProducerMessageReleased,
    RecordedCall,
    RecordedResult,
    Reply,
    RequestAborted,
    RequestBegun,
    RequestCommitted,
    RunFinished,
    RunInterrupted,
    RunPayload,
    RunQueued,
    RunStarted,
    SessionCreated,
    SessionForked,
    SessionReverted,
    ToolResults,
    UnknownEvent,
)
from treemail.core.lifecycle import MessageState, SessionTrigger
from treemail.core.owners import AgentOwner, owner_of
from treemail.core.records import Event, Message, Mode, Owner, Run
from treemail.core.shapes import CODEC, Unfit, shape
from treemail.core.store import WriteTxn

__all__ = [
    "ACCEPTED",
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
    "accepted_data",
    "encode",
    "message_kind",
    "message_payload",
    "message_state",
    "read",
    "record",
    "record_closed",
    "record_message",
    "record_opened",
    "record_run",
    "run_kind",
    "run_payload",
    "schema",
    "schemas",
    "typed",
]

_CLASSES: Mapping[str, type[Payload]] = {cls.KIND.value: cls for cls in PAYLOADS}
if set(_CLASSES) != {kind.value for kind in EventKind}:  # one class per kind, no more
    raise AssertionError(f"events: kinds without one class: {set(EventKind) ^ set(_CLASSES)}")


# -- the typed boundary ----------------------------------------------------------------------------


def record(tx: WriteTxn, session_id: str, payload: Payload) -> Event:
    """Append ``payload`` to the session's log (and the feed)."""
    cls = type(payload)
    encoder = _ENCODERS.get(cls) or _encoder_of(cls)
    return tx.append(session_id, encoder.kind, encoder(payload))


def encode(payload: Payload) -> dict[str, object]:
    """The stored data of ``payload``: plain JSON values, keyed as ``schema`` says."""
    cls = type(payload)
    return (_ENCODERS.get(cls) or _encoder_of(cls))(payload)


class _Encoder:
    """``shape(cls).encode`` of one payload class, and its kind's value, ready per class.

    Every stored state change records an event, and the model checker records millions:
    the fields are read by one getter, and only those whose stored form differs from the
    value (an enum, a nested record, a tuple) go through their codec."""

    __slots__ = ("_codecs", "_keys", "_plain", "_read", "kind")

    def __init__(self, cls: type[Payload]) -> None:
        self.kind: str = cls.KIND.value
        fields = shape(cls).fields
        declared = attrs.fields_dict(cls)
        hints = typing.get_type_hints(cls)
        self._keys = tuple(f.key for f in fields)
        self._codecs: tuple[Callable[[Any], object] | None, ...] = tuple(
            None if _stored_as_is(hints[f.name]) and CODEC not in declared[f.name].metadata
            else f.codec.encode for f in fields)
        self._plain = not any(self._codecs)
        names = [f.name for f in fields]
        read = attrgetter(*names) if names else (lambda _: ())
        # attrgetter of one name answers the value, not a tuple of it
        self._read: Callable[[Any], tuple[Any, ...]] = (
            (lambda payload: (read(payload),)) if len(names) == 1 else read)

    def __call__(self, payload: Payload) -> dict[str, object]:
        values = self._read(payload)
        if self._plain:
            return dict(zip(self._keys, values, strict=True))
        return {key: value if codec is None else codec(value)
                for key, codec, value in zip(self._keys, self._codecs, values, strict=True)}


def _stored_as_is(hint: object) -> bool:
    """Whether ``shapes`` stores a field of type ``hint`` as its value: a str, int, bool or
    None, or a union of those."""
    if hint in (str, int, bool, type(None)):
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return all(_stored_as_is(arg) for arg in typing.get_args(hint))
    return False


_ENCODERS: dict[type, _Encoder] = {}


def _encoder_of(cls: type[Payload]) -> _Encoder:
    encoder = _ENCODERS[cls] = _Encoder(cls)
    return encoder


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


def message_state(payload: MessagePayload) -> str:
    """The lifecycle state a message event records entry into."""
    return payload.KIND.value.removeprefix(MESSAGE_PREFIX).lower()


def message_payload(message: Message) -> MessagePayload:
    """The event recording ``message``'s entry into its current state."""
    owner, kind = owner_of(message), message_kind(message.state)
    common = (message.message_id, owner, message.sender, message.run_id, message.request_id)
    if kind is _ACCEPTED_KIND:
        hop = message.hop if isinstance(owner, AgentOwner) else None
        return ProducerMessageAccepted(*common, message.mode, hop, message.body)
    if kind is _DISCARDED_KIND:
        return ProducerMessageDiscarded(*common, message.reason or "")
    cls = _CLASSES[kind.value]
    assert cls in (ProducerMessageAdmitted, ProducerMessageClaimed, ProducerMessageReleased,
                   ProducerMessageConsumed)
    built: MessagePayload = cls(*common)
    return built


# Enum values read through a table: ``member.value`` is a descriptor call, on every send.
_VALUES: Mapping[object, str] = {member: member.value for member in (*Mode, *Owner)}
_KIND_VALUES: Mapping[EventKind, str] = {kind: kind.value for kind in EventKind}
# Enum members read once, here: under Python 3.11 a member read through its class goes
# through ``EnumType.__getattr__``'s hook, about ten times the cost of reading a global
# (see ``runs``).
_AGENT = Owner.AGENT
_ACCEPTED_KIND = EventKind.PRODUCER_MESSAGE_ACCEPTED
_DISCARDED_KIND = EventKind.PRODUCER_MESSAGE_DISCARDED
_START = SessionTrigger.START
_INTERRUPT = SessionTrigger.INTERRUPT
# ``message_kind`` of each state, read without its call on every message step.
_STATE_KINDS: Mapping[str, EventKind] = {state: message_kind(state) for state in MessageState}
_MAIL_ONLY = frozenset({EventKind.PRODUCER_MESSAGE_ADMITTED, EventKind.PRODUCER_MESSAGE_CLAIMED,
                        EventKind.PRODUCER_MESSAGE_RELEASED, EventKind.PRODUCER_MESSAGE_CONSUMED})


def record_message(tx: WriteTxn, message: Message) -> Event:
    """``record(tx, message.recipient, message_payload(message))``: the entry of ``message``
    into its current state. Every step of a message writes one (the model checker millions),
    so the data of a step past acceptance is built field by field, without a payload record
    (``test_events`` holds the two equal for every state and owner, key order included)."""
    kind = _STATE_KINDS.get(message.state) or message_kind(message.state)
    if message.owner is _AGENT and message.sender is None:
        return record(tx, message.recipient, message_payload(message))  # which refuses it
    if kind is _ACCEPTED_KIND:
        return tx.append(message.recipient, ACCEPTED, accepted_data(message))
    if not (kind in _MAIL_ONLY or kind is _DISCARDED_KIND):
        return record(tx, message.recipient, message_payload(message))
    data: dict[str, object] = {
        "message_id": message.message_id, "owner": _VALUES[message.owner],
        "sender": message.sender, "run_id": message.run_id, "request_id": message.request_id}
    if kind is _DISCARDED_KIND:
        data["reason"] = message.reason or ""
    return tx.append(message.recipient, _KIND_VALUES[kind], data)
ACCEPTED = EventKind.PRODUCER_MESSAGE_ACCEPTED.value


def accepted_data(message: Message) -> dict[str, object]:
    """``encode(message_payload(message))`` of newly accepted mail, built field by field: what
    a send appends, without a payload record and its shape (``test_event_kinds`` holds the two
    equal, key order included, so the stored bytes are the same)."""
    return {"message_id": message.message_id, "owner": _VALUES[message.owner],
            "sender": message.sender, "run_id": message.run_id,
            "request_id": message.request_id, "mode": _VALUES[message.mode],
            "agent_hop": message.hop if message.owner is _AGENT else None,
            "body": message.body}


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


_RUN_KINDS: Mapping[SessionTrigger, str] = {
    trigger: _run_class(trigger).KIND.value for trigger in SessionTrigger}


def record_run(tx: WriteTxn, session_id: str, trigger: SessionTrigger, run: Run,
               reason: str | None, fault: Fault | None = None) -> Event:
    """``record(tx, session_id, run_payload(trigger, run, reason, fault))``, its data built
    field by field, as ``record_message``'s: every step of a session writes one (the model
    checker millions). ``test_events`` holds the two equal for every trigger, key order
    included."""
    kind = _RUN_KINDS[trigger]
    data: dict[str, object] = {"run_id": run.run_id, "run_number": run.number}
    if trigger is _START:
        return tx.append(session_id, kind, data)
    if reason is None:
        raise ValueError(f"a {kind} event needs a reason")
    data["reason"] = reason
    if trigger is _INTERRUPT:
        data["status"], data["endpoint"], data["hint"] = (
            (None, None, None) if fault is None else (fault.status, fault.endpoint, fault.hint))
    return tx.append(session_id, kind, data)


_OPENED = EventKind.REQUEST_BEGUN.value
_COMMITTED = EventKind.REQUEST_COMMITTED.value
_ABORTED = EventKind.REQUEST_ABORTED.value


def record_opened(tx: WriteTxn, session_id: str, run_id: str, request_id: str,
                  message_ids: Iterable[str]) -> Event:
    """``record(tx, session_id, RequestBegun(run_id, request_id, tuple(message_ids)))``, its
    data built field by field, as ``record_run``'s: every model request writes one (the model
    checker millions). ``test_events`` holds the two equal, key order included."""
    return tx.append(session_id, _OPENED, {"run_id": run_id, "request_id": request_id,
                                           "message_ids": list(message_ids)})


def record_closed(tx: WriteTxn, session_id: str, committed: bool, run_id: str,
                  request_id: str) -> Event:
    """``record`` of ``RequestCommitted(run_id, request_id)`` (``committed``), else of
    ``RequestAborted``, its data built field by field, as ``record_opened``'s."""
    return tx.append(session_id, _COMMITTED if committed else _ABORTED,
                     {"run_id": run_id, "request_id": request_id})


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
