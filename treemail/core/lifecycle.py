"""Theory of operation: the lifecycles, declared once.

A message moves through ``MessageLifecycle``, a session through ``SessionLifecycle``, a run
through ``RunLifecycle``, and a run's model request through ``RequestLifecycle``. Each is a
python-statemachine class, so the library checks at class definition that every state is
reachable and that no non-final state is a trap.

Each machine's states come from one ``StrEnum`` (``MessageState``, ...) through
``States.from_enum``: the enum is the only place a state is spelled, and it is what the rest
of treemail names states by, so mypy catches a misspelt state. (The other direction, an enum
built at run time from the machine, would be invisible to mypy.) No other module writes a
state name as a string; ``tests/unit/test_state_names.py`` enforces that over the AST.

Instantiating a machine per message costs about 150 µs per transition and several hundred
per instance, far too much for the send path. So at import time each class is flattened into
a ``Lifecycle`` table, ``{(state, event): target}``, and the engine steps records through that
table. The table is derived, never written by hand: a test fires every event of the real
machine class from every state and checks that it agrees with the table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast

import attrs
from statemachine import StateMachine
from statemachine.states import States

from treemail.core.errors import IllegalTransition

__all__ = [
    "MESSAGE",
    "REQUEST",
    "RUN",
    "SESSION",
    "Lifecycle",
    "MessageLifecycle",
    "MessageState",
    "RequestLifecycle",
    "RequestState",
    "RunLifecycle",
    "RunState",
    "SessionLifecycle",
    "SessionState",
]


class MessageState(enum.StrEnum):
    ACCEPTED = "accepted"
    ADMITTED = "admitted"
    CLAIMED = "claimed"
    RELEASED = "released"
    CONSUMED = "consumed"
    DISCARDED = "discarded"

    @property
    def pending(self) -> bool:
        """Unacknowledged: in every state but the final ones (consumed, discarded)."""
        return self not in _MESSAGE_FINAL

    @property
    def deliverable(self) -> bool:
        """Waiting to be put into a model request (admitted, or released by an abort)."""
        return self in _DELIVERABLE


class SessionState(enum.StrEnum):
    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"

    @property
    def has_run(self) -> bool:
        """A run is queued or running; the session's ``run_id`` names it."""
        return self in _HAS_RUN


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"


class RequestState(enum.StrEnum):
    """A run's model request: none open, or one open (``Run.open_request`` names it)."""

    NO_REQUEST = "no_request"
    REQUEST_OPEN = "request_open"


_MESSAGE_FINAL = frozenset({MessageState.CONSUMED, MessageState.DISCARDED})
_DELIVERABLE = frozenset({MessageState.ADMITTED, MessageState.RELEASED})
_HAS_RUN = frozenset({SessionState.QUEUED, SessionState.RUNNING})


class MessageLifecycle(StateMachine):
    """A message from acceptance until it is consumed exactly once or discarded with a reason."""

    s = States.from_enum(MessageState, initial=MessageState.ACCEPTED, final=_MESSAGE_FINAL)

    # The recipient's actor took it into pending input: of the in-flight run or the next.
    admit = s.ACCEPTED.to(s.ADMITTED)
    # Put into a model request built at a safe boundary, bound to (run, request).
    claim = s.ADMITTED.to(s.CLAIMED) | s.RELEASED.to(s.CLAIMED)
    # That request did not commit (cancelled, model error, crash found at restart).
    release = s.CLAIMED.to(s.RELEASED)
    # The request that carried it committed: it is in the transcript, exactly once.
    consume = s.CLAIMED.to(s.CONSUMED)
    # Dropped by an explicit decision, always with a reason. Never from claimed: a message
    # inside an open request is released first, so it cannot vanish from under a commit.
    discard = s.ACCEPTED.to(s.DISCARDED) | s.ADMITTED.to(s.DISCARDED) | s.RELEASED.to(s.DISCARDED)


class SessionLifecycle(StateMachine):
    """A session's runs. Residency of its in-memory actor is a separate flag, not a state."""

    s = States.from_enum(SessionState, initial=SessionState.IDLE)

    # A run is wanted: a first task, a user turn, or mail waking an idle or finished session.
    enqueue = s.IDLE.to(s.QUEUED) | s.FINISHED.to(s.QUEUED)
    start = s.QUEUED.to(s.RUNNING)
    # The run completed its task.
    finish = s.RUNNING.to(s.FINISHED)
    # The run (or the queued run) was cancelled or found dead at restart.
    interrupt = s.RUNNING.to(s.IDLE) | s.QUEUED.to(s.IDLE)


class RunLifecycle(StateMachine):
    """One run of a session, from queued until it finished or was interrupted."""

    s = States.from_enum(RunState, initial=RunState.QUEUED,
                         final={RunState.FINISHED, RunState.INTERRUPTED})

    start = s.QUEUED.to(s.RUNNING)
    # The run completed its task, between model requests.
    finish = s.RUNNING.to(s.FINISHED)
    # Cancelled before or while running, or found dead at restart (an open request is
    # aborted first).
    interrupt = s.QUEUED.to(s.INTERRUPTED) | s.RUNNING.to(s.INTERRUPTED)


class RequestLifecycle(StateMachine):
    """The model request of a running run: at most one is open at a time."""

    s = States.from_enum(RequestState, initial=RequestState.NO_REQUEST)

    # A safe boundary: a request opens and claims the run's deliverable mail.
    begin_request = s.NO_REQUEST.to(s.REQUEST_OPEN)
    # Its mail is consumed (commit) or released for the next boundary (abort).
    commit_request = s.REQUEST_OPEN.to(s.NO_REQUEST)
    abort_request = s.REQUEST_OPEN.to(s.NO_REQUEST)
    # A run ends only between requests; interrupting one aborts its open request first.
    end = s.NO_REQUEST.to.itself()


S = TypeVar("S", bound=enum.StrEnum)


@attrs.frozen
class Lifecycle(Generic[S]):
    """A machine class flattened to a lookup table; stepping it is one dict access.

    States are the machine's ``StrEnum`` members; a plain string equal to a state's value
    finds the same entry (a ``StrEnum`` hashes and compares as its value)."""

    name: str
    initial: S
    states: tuple[S, ...]
    final: frozenset[S]
    events: tuple[str, ...]
    transitions: Mapping[tuple[S, str], S]

    @classmethod
    def derive(cls, machine: type[StateMachine], kind: type[S]) -> Lifecycle[S]:
        """The table of ``machine``, whose states were declared by ``kind``."""
        states = {state.id: kind(state.value) for state in machine.states}
        table: dict[tuple[S, str], S] = {}
        for state in machine.states:
            for transition in state.transitions:
                for event in transition.events:
                    table[(states[state.id], event.id)] = states[transition.target.id]
        return cls(
            name=machine.__name__,
            initial=next(states[s.id] for s in machine.states if s.initial),
            states=tuple(states.values()),
            final=frozenset(states[s.id] for s in machine.states if s.final),
            # The metaclass turns ``events`` into a class-level list; mypy sees the method.
            events=tuple(e.id for e in cast("list[Any]", machine.events)),
            transitions=table,
        )

    def step(self, subject: str, state: S, event: str) -> S:
        """The state after ``event``; raises ``IllegalTransition`` (and changes nothing) if none.
        The error lists the events the table allows from ``state``."""
        target = self.transitions.get((state, event))
        if target is None:
            raise IllegalTransition(subject, event, str(state), self.allowed(state))
        return target

    def allowed(self, state: S) -> tuple[str, ...]:
        return tuple(e for e in self.events if (state, e) in self.transitions)

    def is_final(self, state: S) -> bool:
        return state in self.final


MESSAGE = Lifecycle.derive(MessageLifecycle, MessageState)
SESSION = Lifecycle.derive(SessionLifecycle, SessionState)
RUN = Lifecycle.derive(RunLifecycle, RunState)
REQUEST = Lifecycle.derive(RequestLifecycle, RequestState)
