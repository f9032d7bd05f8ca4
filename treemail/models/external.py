"""The reference model's external sessions (spec/external.md): sessions no actor hosts, whose
MCP client's calls are their request boundaries. ``check`` claims the session's mail into a
new turn's request, the client's next call or its connection's end settles that request
(``settle``), and a tool call runs as the turn in flight or opens one (``turn_run``).

Functions of the ``Reference`` they act on, as ``receipts`` is: each is one operation of the
model, all or nothing, built from the model's own steps.
"""

from __future__ import annotations

from typing import Any

from treemail.core import errors
from treemail.core.lifecycle import MessageState, RunState, RunTrigger, SessionState, SessionTrigger
from treemail.core.records import AgentSpec
from treemail.models.world import RunRecord, SessionRecord

# The reference model these read and step (``Reference``; not imported: it imports this),
# and the request its check_mail opens (``reference.Delivered``).
Reference = Any
Delivered = tuple[str, str, tuple[tuple[str, Any, str], ...]]

__all__ = ["attach", "check", "settle", "turn_run"]


def attach(model: Reference, parent_id: str, agent: AgentSpec) -> str:
    """An external child: no task, no actor; its client's calls are its boundaries."""

    def work() -> str:
        child: SessionRecord = model._new_session(agent, model._session(parent_id), False)
        child.external = True
        return child.session_id

    attached: str = model._atomic(work)
    return attached


def check(model: Reference, session_id: str) -> Delivered | None:
    """check_mail: nothing deliverable, nothing changes; else the turn in flight ends and a
    new run's request claims every deliverable message."""

    def work() -> Delivered | None:
        session = _external(model, session_id)
        run = model.world.runs[session.run_id] if session.run_id is not None else None
        running = run if run is not None and run.status == RunState.RUNNING else None
        if running is not None and running.open_request is not None:
            raise errors.ExternalBusy("another call holds the session's claimed mail")
        model._expire(session_id, model._now())
        model._admit(session)
        if all(m.state == MessageState.CLAIMED for m in model.world.pending_of(session_id)):
            return None
        if running is not None:
            model._end(session, running, RunTrigger.FINISH)
        model._reconcile(session_id)
        delivered: Delivered = model._begin(session_id, model._start(session_id))
        return delivered

    checked: Delivered | None = model._atomic(work)
    return checked


def settle(model: Reference, session_id: str, run_id: str, request_id: str,
           committed: bool) -> bool:
    """The client's next call (committed) or its connection's end: False when the request is
    no longer open (recovery released it)."""
    session = model._session(session_id)
    run = model.world.runs.get(run_id)
    if (session.run_id != run_id or run is None or run.status != RunState.RUNNING
            or run.open_request != request_id):
        return False
    model._atomic(lambda: model._close(session_id, run_id, request_id, committed))
    return True


def turn_run(model: Reference, session_id: str) -> str:
    """The run a client's tool call runs as: the turn in flight, else a new one."""

    def work() -> str:
        session = _external(model, session_id)
        if session.state == SessionState.RUNNING and session.run_id is not None:
            return session.run_id
        if session.state != SessionState.QUEUED:
            run = RunRecord(model.ids.new_id(), session_id,
                            model.world.next_run_number(session_id))
            model.world.runs[run.run_id] = run
            model._step_session(session, SessionTrigger.ENQUEUE, run)
        started: str = model._start(session_id)
        return started

    turn: str = model._atomic(work)
    return turn


def _external(model: Reference, session_id: str) -> SessionRecord:
    session: SessionRecord = model._session(session_id)
    if not session.external:
        raise errors.ExternalOnly(f"session {session_id} is hosted, not external")
    return session
