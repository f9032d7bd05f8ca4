"""Runs and model requests, as steps inside one store transaction each.

A run binds the mail it will read: at start, everything waiting for "the next run"; while it
runs, steered mail admitted into it. ``begin`` claims the bound mail at a safe boundary,
``close`` consumes it (committed) or releases it (aborted). Ending a run hands whatever it
never claimed to the next run, and ``reconcile`` queues that run when one is needed.

A run's status steps through ``RUN`` (``transitions.step_run``) and its model request through
``REQUEST`` (``_step_request``); an illegal step is refused by the table, naming the triggers it
allows, before anything is written.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, assert_never

import attrs

from treemail.core import events
from treemail.core.envelope import interruption_result, render_mail
from treemail.core.errors import UnknownTarget
from treemail.core.expiry import expire_due, flip
from treemail.core.ids import IdSource, storable
from treemail.core.keys import delegation_counter, runs_counter
from treemail.core.lifecycle import (
    REQUEST,
    SESSION,
    MessageState,
    MessageTrigger,
    RequestState,
    RequestTrigger,
    RunState,
    RunTrigger,
    SessionTrigger,
)
from treemail.core.records import Message, Owner, Run, Session
from treemail.core.sending import AgentCatalogue, current_rules
from treemail.core.store import ReadTxn, WriteTxn
from treemail.core.transitions import (
    accept,
    admit_accepted,
    bound_in,
    bound_to,
    evolve,
    step_message,
    step_run,
    step_session,
)

__all__ = [
    "CRASH",
    "Delivery",
    "Request",
    "begin",
    "close",
    "complete_delegation",
    "end",
    "live_run",
    "need_run",
    "need_session",
    "reconcile",
    "recover",
    "report_interruption",
    "request_log",
    "start",
]


# The reason recorded on a run that recovery found dead.
CRASH = "crash found at restart"

# Enum members read once, here: under Python 3.11 a member read through its class
# (``Owner.AGENT``) goes through ``EnumType.__getattr__``'s hook, about ten times the cost of
# reading a global, and the model checker takes millions of steps.
_RUNNING = RunState.RUNNING
_ENQUEUE = SessionTrigger.ENQUEUE
_SESSION_START = SessionTrigger.START
_RUN_START = RunTrigger.START
_BEGIN_REQUEST = RequestTrigger.BEGIN_REQUEST
_COMMIT_REQUEST = RequestTrigger.COMMIT_REQUEST
_ABORT_REQUEST = RequestTrigger.ABORT_REQUEST
_END = RequestTrigger.END
_REQUEST_OPEN = RequestState.REQUEST_OPEN
_CLAIM = MessageTrigger.CLAIM
_CONSUME = MessageTrigger.CONSUME
_RELEASE = MessageTrigger.RELEASE
_CLAIMED = MessageState.CLAIMED
_INTERRUPT = RunTrigger.INTERRUPT
_AGENT = Owner.AGENT
_DELEGATION = Owner.DELEGATION

def request_log(trigger: RequestTrigger) -> events.EventKind | None:
    """The event-log kind recording each request step (``end`` changes nothing, logs
    nothing); mypy checks every trigger is answered."""
    match trigger:
        case RequestTrigger.BEGIN_REQUEST:
            return events.RequestBegun.KIND
        case RequestTrigger.COMMIT_REQUEST:
            return events.RequestCommitted.KIND
        case RequestTrigger.ABORT_REQUEST:
            return events.RequestAborted.KIND
        case RequestTrigger.END:
            return None
        case _:
            assert_never(trigger)


@attrs.frozen
class Delivery:
    """One message as it enters a model request: ``text`` is exactly what the model sees."""

    message_id: str
    owner: Owner
    text: str


@attrs.frozen
class Request:
    """A model request opened at a safe boundary, with the mail it claimed."""

    request_id: str
    run_id: str
    deliveries: tuple[Delivery, ...]


def need_session(tx: ReadTxn, session_id: str) -> Session:
    session = tx.session(session_id) if storable(session_id) else None
    if session is None:
        raise UnknownTarget(f"no session {session_id}")
    return session


def need_run(tx: ReadTxn, run_id: str) -> Run:
    run = tx.run(run_id) if storable(run_id) else None
    if run is None:
        raise UnknownTarget(f"no run {run_id}")
    return run


def live_run(tx: ReadTxn, session_id: str, run_id: str) -> tuple[Session, Run]:
    session = need_session(tx, session_id)
    run = need_run(tx, run_id)
    if session.run_id != run_id or run.status is not _RUNNING:
        raise UnknownTarget(f"run {run_id} is not the running run of session {session_id}")
    return session, run


def reconcile(tx: WriteTxn, ids: IdSource, session_id: str, now: float | None = None,
              ttl: int = 0) -> None:
    """Admit accepted mail; a session with deliverable mail and no run gets one (the wake)."""
    session = need_session(tx, session_id)
    expire_due(tx, session_id, now, ttl)
    current = tx.run(session.run_id) if session.run_id is not None else None
    pending = admit_accepted(tx, session, current)
    if not session.state.has_run and next(bound_in(pending, None), None):
        number = tx.add(runs_counter(session_id), 1)
        run = Run(ids.new_id(), session_id, number)
        tx.put_run(run)
        step_session(tx, session, _ENQUEUE, run, reason="wake")


def start(tx: WriteTxn, session_id: str) -> Run:
    session = need_session(tx, session_id)
    # Refused before anything is written; the error lists what the session allows instead.
    SESSION.step(f"session {session_id}", session.state, _SESSION_START)
    if session.run_id is None:
        raise UnknownTarget(f"session {session_id} is queued without a run")
    # Mail accepted while queued belongs to this run.
    pending = admit_accepted(tx, session, None)
    run = step_run(tx, need_run(tx, session.run_id), _RUN_START)
    step_session(tx, session, _SESSION_START, run)  # neither step touches mail
    for message in bound_in(pending, None):
        tx.put_message(evolve(message, run_id=run.run_id))
    return run


def begin(
    tx: WriteTxn, ids: IdSource, session_id: str, run_id: str,
    agents: AgentCatalogue | None = None, now: float | None = None, ttl: int = 0,
) -> Request:
    session, run = live_run(tx, session_id, run_id)
    # Refused before the request id is minted.
    REQUEST.step(f"run {run_id}", run.request_state, _BEGIN_REQUEST)
    expire_due(tx, session_id, now, ttl)  # a boundary: stale mail goes before the claim
    pending = admit_accepted(tx, session, run)
    request_id = ids.new_id()
    claimed = [
        step_message(tx, m, _CLAIM, request_id=request_id, **flip(m, now))
        for m in bound_in(pending, run_id)
    ]
    _step_request(tx, run, _BEGIN_REQUEST, request_id)
    events.record_opened(tx, session_id, run_id, request_id, [m.message_id for m in claimed])
    return Request(request_id, run_id, tuple([_delivery(tx, session, m, agents)
                                              for m in claimed]))


def _delivery(
    tx: ReadTxn, recipient: Session, message: Message, agents: AgentCatalogue | None
) -> Delivery:
    """The message as the recipient's model reads it: rendered here, from the text its
    producer wrote, by the one rendering module (spec/envelope.md)."""
    sender = _sender(tx, message)
    text = render_mail(
        message.owner, message.body,
        sender_reference=sender.reference if sender is not None else None,
        from_child=sender is not None and sender.parent_session_id == recipient.session_id,
        reply_hint=message.owner is _AGENT and current_rules(agents, recipient).visible)
    return Delivery(message.message_id, message.owner, text)


def _sender(tx: ReadTxn, message: Message) -> Session | None:
    """The session that sent ``message``. Agent mail always has one; outside mail names one
    only as provenance (a library caller may name any id), so a missing one is no error."""
    if message.owner is _AGENT and message.sender is not None:
        return need_session(tx, message.sender)
    if message.sender is None or not storable(message.sender):
        return None
    return tx.session(message.sender)


def close(tx: WriteTxn, session_id: str, run_id: str, request_id: str, committed: bool,
          now: float | None = None) -> None:
    _, run = live_run(tx, session_id, run_id)
    if run.open_request != request_id:
        raise UnknownTarget(f"request {request_id} is not the open request of run {run_id}")
    _settle(tx, run, committed, now)


def _step_request(
    tx: WriteTxn, run: Run, trigger: RequestTrigger, request_id: str | None = None,
    **changes: Any,
) -> Run:
    """Step the run's request through ``REQUEST``; ``request_id`` names a request it opens."""
    target = REQUEST.step(f"run {run.run_id}", run.request_state, trigger)
    opened = request_id if target is _REQUEST_OPEN else None
    updated = evolve(run, open_request=opened, **changes)
    tx.put_run(updated)
    return updated


def _settle(tx: WriteTxn, run: Run, committed: bool, now: float | None = None) -> Run:
    base_hop = run.base_hop
    for message in list(tx.pending(run.session_id)):
        if message.state is not _CLAIMED or message.request_id != run.open_request:
            continue
        if committed:
            step_message(tx, message, _CONSUME)
            if message.owner is _AGENT:
                base_hop = max(base_hop, message.hop)
        else:
            step_message(tx, message, _RELEASE, request_id=None,
                         **flip(message, now))
    trigger = _COMMIT_REQUEST if committed else _ABORT_REQUEST
    settled = _step_request(tx, run, trigger, base_hop=base_hop)
    assert run.open_request is not None  # _settle is only called on an open request
    events.record_closed(tx, run.session_id, committed, run.run_id, run.open_request)
    return settled


def end(
    tx: WriteTxn, ids: IdSource, session_id: str, run_id: str, trigger: RunTrigger, reason: str,
    fault: events.Fault | None = None, *, wake: bool = True, now: float | None = None,
) -> Session:
    """Finish (``RunTrigger.FINISH``) or interrupt (``RunTrigger.INTERRUPT``) the session's
    current run.

    ``wake=False`` leaves the session idle even with mail left: it runs again only when new
    input reconciles it (the runtime's give-up after repeated model failures)."""
    session = need_session(tx, session_id)
    if session.run_id != run_id:
        raise UnknownTarget(f"run {run_id} is not the current run of {session_id}")
    run = need_run(tx, run_id)
    if fault is None:
        _end(tx, session, run, trigger, reason, now=now)
    else:
        _close(tx, session, run, trigger, reason, fault, now)
    if wake:
        reconcile(tx, ids, session_id)
    return session


def _end(tx: WriteTxn, session: Session, run: Run, trigger: RunTrigger, reason: str,
         *, now: float | None = None) -> None:
    # The seam the model checker's planted bugs replace (treemail.models.plants): its
    # signature stays as they know it; a model fault goes through ``_close`` directly.
    _close(tx, session, run, trigger, reason, None, now)


def _close(tx: WriteTxn, session: Session, run: Run, trigger: RunTrigger, reason: str,
           fault: events.Fault | None, now: float | None = None) -> None:
    # An interrupt aborts an open request first; a finish with one open is refused by the
    # table (a run ends only between requests), naming commit_request and abort_request.
    if run.request_state is _REQUEST_OPEN and trigger is _INTERRUPT:
        run = _settle(tx, run, committed=False, now=now)
    REQUEST.step(f"run {run.run_id}", run.request_state, _END)
    step_session(tx, session, trigger.session, run, reason=reason, fault=fault)
    step_run(tx, run, trigger)
    # Mail bound to this run but never claimed in it waits for the next run.
    for message in list(bound_to(tx, session.session_id, run.run_id)):
        tx.put_message(evolve(message, run_id=None))


def complete_delegation(tx: WriteTxn, ids: IdSource, child: Session, result: str) -> bool:
    """Report a delegated session's result to its parent, once: the first finished run
    completes the delegation; a session woken later reports only by sending mail."""
    if child.parent_session_id is None or tx.count(delegation_counter(child.session_id)):
        return False
    tx.add(delegation_counter(child.session_id), 1)
    # Stored as the child wrote it; the parent's request renders it as a <subagent_result>.
    message = accept(tx, ids, child.parent_session_id, result, _DELEGATION,
                     child.session_id)
    events.record(tx, child.session_id, events.DelegationCompleted(message.message_id))
    reconcile(tx, ids, child.parent_session_id)
    return True


def report_interruption(tx: WriteTxn, ids: IdSource, child: Session, reason: str) -> bool:
    """Tell a delegated session's parent that its run stopped without a result. The delegation
    stays open: a later finished run still reports its result."""
    if child.parent_session_id is None:
        return False
    accept(tx, ids, child.parent_session_id, interruption_result(reason), _DELEGATION,
           child.session_id)
    reconcile(tx, ids, child.parent_session_id)
    return True


def recover(tx: WriteTxn, ids: IdSource, trees: Collection[str] | None = None,
            now: float | None = None, ttl: int = 0) -> int:
    """Interrupt every run still marked running (it died with the process), then reconcile
    every session; only those of ``trees`` (roots) when given, the trees a daemon took over
    from a dead one. Returns the number of dead runs."""
    dead = 0
    for session in list(tx.sessions()):
        if trees is not None and session.root_session_id not in trees:
            continue
        run = tx.run(session.run_id) if session.run_id is not None else None
        if run is not None and run.status is _RUNNING:
            _end(tx, session, run, _INTERRUPT, CRASH, now=now)
            dead += 1
        reconcile(tx, ids, session.session_id, now, ttl)
    return dead
