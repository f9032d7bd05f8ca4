"""Lifecycle transitions of stored records: messages, sessions and runs stepped through their
lifecycles inside a store transaction.

Every stored state change passes through ``step_message``, ``step_session`` or ``step_run``:
the lifecycle table decides the target state, the record is rewritten, the guard counters
follow, and the matching entry is appended to the session's log in the same transaction.
There is no other path that writes a ``state`` or ``status`` field. (A run's request state is
``open_request``, stepped by ``runs`` through ``REQUEST``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import Any, TypeVar

import attrs

from treemail.core import events
from treemail.core.errors import InvalidRequest
from treemail.core.events import EventKind
from treemail.core.ids import IdSource
from treemail.core.keys import inbox_counter, pair_counter, seq_counter
from treemail.core.lifecycle import (
    MESSAGE,
    RUN,
    SESSION,
    MessageState,
    MessageTrigger,
    RunState,
    RunTrigger,
    SessionTrigger,
)
from treemail.core.records import Message, Mode, Owner, Run, Session
from treemail.core.store import ReadTxn, WriteTxn

__all__ = [
    "accept",
    "admit_accepted",
    "bound_in",
    "bound_to",
    "evolve",
    "message_event",
    "session_event",
    "step_message",
    "step_run",
    "step_session",
]

R = TypeVar("R")

# Enum members read once, here: under Python 3.11 a member read through its class goes
# through ``EnumType.__getattr__``'s hook, about ten times the cost of reading a global
# (see ``runs``).
_AGENT = Owner.AGENT
_RUNNING = RunState.RUNNING
_ACCEPTED = MessageState.ACCEPTED
_STEER = Mode.STEER
_ADMIT = MessageTrigger.ADMIT


# A record class's init arguments: each one's place, how many are passed by position (the
# rest are keyword-only, by name), and one getter reading them all in that order.
Layout = tuple[dict[str, int], int, Callable[[Any], tuple[Any, ...]]]
_LAYOUTS: dict[type[Any], Layout] = {}


def _layout(cls: type[Any]) -> Layout:
    """A record class's layout (kept by class)."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _read_layout(cls)
    return layout


def _read_layout(cls: type[Any]) -> Layout:
    init = [field for field in attrs.fields(cls) if field.init]
    fields = [f for f in init if not f.kw_only] + [f for f in init if f.kw_only]
    read = attrgetter(*(f.name for f in fields))
    places = {field.alias: place for place, field in enumerate(fields)}
    positional = sum(not f.kw_only for f in fields)
    if len(fields) == 1:  # attrgetter of one name answers the value, not a tuple of it
        return places, positional, lambda record: (read(record),)
    return places, positional, read


def evolve(record: R, **changes: Any) -> R:
    """``attrs.evolve``: a copy of ``record`` with ``changes``, built through its class's
    ``__init__`` (converters and validators run alike), its fields read by one getter and
    passed by position instead of looked up and passed by name one by one: every stored
    state change makes one, and the model checker makes millions."""
    cls: type[Any] = type(record)
    places, positional, read = _LAYOUTS.get(cls) or _layout(cls)
    values = list(read(record))
    try:  # a field's place looked up once, not asked for and then checked
        for name, value in changes.items():
            values[places[name]] = value
    except KeyError:
        raise TypeError(f"{cls.__name__} has no field {name!r} to evolve") from None
    if positional == len(values):
        made: R = cls(*values)
        return made
    names = list(places)[positional:]
    built: R = cls(*values[:positional], **dict(zip(names, values[positional:], strict=True)))
    return built


def message_event(state: MessageState) -> EventKind:
    """The event-log kind recording entry into ``state``: ProducerMessageAccepted, ..."""
    return events.message_kind(state)


def session_event(trigger: SessionTrigger) -> EventKind:
    """The event-log kind recording session trigger ``trigger``: RunQueued, ..."""
    return events.run_kind(trigger)


def _track(tx: WriteTxn, message: Message, delta: int) -> None:
    """Keep the O(1) guard counters: pending agent mail per recipient and per directed pair."""
    if message.owner is _AGENT and message.sender is not None:
        tx.add(inbox_counter(message.recipient), delta)
        tx.add(pair_counter(message.sender, message.recipient), delta)


def accept(
    tx: WriteTxn, ids: IdSource, recipient: str, body: str, owner: Owner, sender: str | None,
    mode: Mode = Mode.QUEUE, hop: int = 0, now: float | None = None,
) -> Message:
    """Mail enters ``recipient``: persist it in its initial state, keep the guard counters and
    log ProducerMessageAccepted. Agent mail passed its guards before; here none applies. Only
    text every store can hold: a lone surrogate is refused, before anything is written.
    ``now`` (expiry on) starts the age of agent mail, the only mail that expires."""
    _check_text(body)
    message = Message(
        message_id=ids.new_id(),
        recipient=recipient,
        sender=sender,
        owner=owner,
        body=body,
        mode=mode,
        hop=hop,
        seq=tx.add(seq_counter(recipient), 1),
        aged=now if owner is _AGENT else None,
    )
    tx.put_message(message)
    _track(tx, message, +1)
    events.record_message(tx, message)
    return message


def _check_text(body: str) -> None:
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            f"the mail is not valid Unicode text: a lone surrogate (U+{ord(body[exc.start]):04X}) "
            f"at character {exc.start}; replace it, for example with U+FFFD, and send again",
            position=exc.start) from None


def step_message(
    tx: WriteTxn, message: Message, trigger: MessageTrigger, **changes: Any
) -> Message:
    state = MESSAGE.step(f"message {message.message_id}", message.state, trigger)
    updated = evolve(message, state=state, **changes)
    tx.put_message(updated)
    if not state.pending:
        _track(tx, updated, -1)
    events.record_message(tx, updated)
    return updated


def step_session(
    tx: WriteTxn, session: Session, trigger: SessionTrigger, run: Run, reason: str | None = None,
    fault: events.Fault | None = None,
) -> Session:
    state = SESSION.step(f"session {session.session_id}", session.state, trigger)
    run_id = run.run_id if state.has_run else None
    updated = evolve(session, state=state, run_id=run_id)
    tx.put_session(updated)
    events.record_run(tx, session.session_id, trigger, run, reason, fault)
    return updated


def step_run(tx: WriteTxn, run: Run, trigger: RunTrigger, **changes: Any) -> Run:
    """Step the run through ``RUN`` and store it; the session's log entry records the change."""
    status = RUN.step(f"run {run.run_id}", run.status, trigger)
    updated = evolve(run, status=status, **changes)
    tx.put_run(updated)
    return updated


def bound_to(tx: ReadTxn, recipient: str, run_id: str | None) -> Iterator[Message]:
    """Deliverable mail of ``recipient`` bound to ``run_id`` (None: the next run), in order."""
    return bound_in(tx.pending(recipient), run_id)


def bound_in(pending: Iterable[Message], run_id: str | None) -> Iterator[Message]:
    """``bound_to`` over ``pending``: a recipient's pending mail, as ``admit_accepted``
    answers it, read once instead of scanned again."""
    return (m for m in pending if m.state.deliverable and m.run_id == run_id)


def admit_accepted(tx: WriteTxn, session: Session, current: Run | None) -> list[Message]:
    """Take accepted mail into pending input: steer joins the running run, the rest waits for
    the next one. A steer that lost the race with the end of its run lands in the next run.

    Returns the session's pending mail as it is now, in order: every caller reads it next,
    and admission adds and drops no pending mail, so a second scan would find the same."""
    running = current if current is not None and current.status is _RUNNING else None
    pending = list(tx.pending(session.session_id))
    for at, message in enumerate(pending):
        if message.state is not _ACCEPTED:
            continue
        joins = running is not None and message.mode is _STEER
        pending[at] = step_message(tx, message, _ADMIT,
                                   run_id=running.run_id if joins and running else None)
    return pending
