"""Theory of operation: the lifecycles, declared once.

A message moves through ``MessageLifecycle``, a session through ``SessionLifecycle``, a run
through ``RunLifecycle``, a run's model request through ``RequestLifecycle``, and a tool call
held for the user's answer through ``ApprovalLifecycle``. Each is a
python-statemachine class, so the library checks at class definition that every state is
reachable and that no non-final state is a trap.

Each machine's states come from one ``StrEnum`` (``MessageState``, ...) through
``States.from_enum``, and its triggers from another (``MessageTrigger``, ...), each declared
as ``Event(transitions, id=Trigger.X, name=meaning)``: the enums are the only place a state or
a trigger is spelled, and they are what the rest of treemail names them by, so mypy catches a
misspelt one. (The other direction, an enum built at run time from the machine, would be
invisible to mypy.) A trigger's meaning is its ``Event``'s ``name``; ``spec/`` shows it from
there. No other module writes a state or trigger name as a string;
``tests/unit/test_state_names.py`` enforces that over the AST.

Instantiating a machine per message costs about 150 µs per transition and several hundred
per instance, far too much for the send path. So at import time each class is flattened into
a ``Lifecycle`` table, ``{(state, trigger): target}``, and the engine steps records through
that table. The table is derived, never written by hand: a test fires every trigger of the
real machine class from every state and checks that it agrees with the table.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from typing import Generic, TypeVar, cast

import attrs
from statemachine import Event, StateMachine
from statemachine.states import States

from treemail.core.errors import IllegalTransition

__all__ = [
    "APPROVAL",
    "MESSAGE",
    "REQUEST",
    "RUN",
    "SESSION",
    "ApprovalLifecycle",
    "ApprovalState",
    "ApprovalTrigger",
    "Lifecycle",
    "MessageLifecycle",
    "MessageState",
    "MessageTrigger",
    "RequestLifecycle",
    "RequestState",
    "RequestTrigger",
    "RunLifecycle",
    "RunState",
    "RunTrigger",
    "SessionLifecycle",
    "SessionState",
    "SessionTrigger",
]


class MessageState(enum.StrEnum):
    ACCEPTED = "accepted"
    ADMITTED = "admitted"
    CLAIMED = "claimed"
    RELEASED = "released"
    CONSUMED = "consumed"
    DISCARDED = "discarded"

    # Cached on each member (read from its ``__dict__`` after the first time, without a call):
    # every stored step of a message asks these.
    @functools.cached_property
    def pending(self) -> bool:
        """Unacknowledged: in every state but the final ones (consumed, discarded)."""
        return self not in _MESSAGE_FINAL

    @functools.cached_property
    def deliverable(self) -> bool:
        """Waiting to be put into a model request (admitted, or released by an abort)."""
        return self in _DELIVERABLE


class SessionState(enum.StrEnum):
    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"

    @functools.cached_property  # as ``MessageState.pending``
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


class ApprovalState(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"


class MessageTrigger(enum.StrEnum):
    ADMIT = "admit"
    CLAIM = "claim"
    RELEASE = "release"
    CONSUME = "consume"
    DISCARD = "discard"
    CANCEL = "cancel"
    EXPIRE = "expire"


class SessionTrigger(enum.StrEnum):
    ENQUEUE = "enqueue"
    START = "start"
    FINISH = "finish"
    INTERRUPT = "interrupt"


class RunTrigger(enum.StrEnum):
    START = "start"
    FINISH = "finish"
    INTERRUPT = "interrupt"

    @property
    def session(self) -> SessionTrigger:
        """The session trigger that records this step of its current run (start, finish,
        interrupt): a session and its run move together."""
        return _SESSION_OF_RUN[self]


class RequestTrigger(enum.StrEnum):
    BEGIN_REQUEST = "begin_request"
    COMMIT_REQUEST = "commit_request"
    ABORT_REQUEST = "abort_request"
    END = "end"


class ApprovalTrigger(enum.StrEnum):
    APPROVE = "approve"
    DENY = "deny"


_SESSION_OF_RUN = {
    RunTrigger.START: SessionTrigger.START,
    RunTrigger.FINISH: SessionTrigger.FINISH,
    RunTrigger.INTERRUPT: SessionTrigger.INTERRUPT,
}
_MESSAGE_FINAL = frozenset({MessageState.CONSUMED, MessageState.DISCARDED})
_DELIVERABLE = frozenset({MessageState.ADMITTED, MessageState.RELEASED})
_HAS_RUN = frozenset({SessionState.QUEUED, SessionState.RUNNING})


class MessageLifecycle(StateMachine):
    """A message from acceptance until it is consumed exactly once or discarded with a reason."""

    s = States.from_enum(MessageState, initial=MessageState.ACCEPTED, final=_MESSAGE_FINAL)

    admit = Event(s.ACCEPTED.to(s.ADMITTED), id=MessageTrigger.ADMIT,
                  name="the recipient's actor takes the mail into pending input")
    claim = Event(s.ADMITTED.to(s.CLAIMED) | s.RELEASED.to(s.CLAIMED), id=MessageTrigger.CLAIM,
                  name="a request opened at a safe boundary takes the mail, bound to (run, "
                  "request)")
    release = Event(s.CLAIMED.to(s.RELEASED), id=MessageTrigger.RELEASE,
                    name="the request did not commit (cancelled, model error, crash found at "
                    "restart)")
    consume = Event(s.CLAIMED.to(s.CONSUMED), id=MessageTrigger.CONSUME,
                    name="the request that carried the mail committed")
    # Never from claimed: a message inside an open request is released first, so it cannot
    # vanish from under a commit.
    discard = Event(
        s.ACCEPTED.to(s.DISCARDED) | s.ADMITTED.to(s.DISCARDED) | s.RELEASED.to(s.DISCARDED),
        id=MessageTrigger.DISCARD,
        name="an explicit decision drops unclaimed mail (session deleted, operator)")
    # Both are discards with a fixed reason, kept as triggers of their own so that the
    # tables, the checker's coverage and the refusal name them. Neither leaves claimed: mail
    # in an open request is past recall, and the time it spends claimed never ages it.
    cancel = Event(
        s.ACCEPTED.to(s.DISCARDED) | s.ADMITTED.to(s.DISCARDED) | s.RELEASED.to(s.DISCARDED),
        id=MessageTrigger.CANCEL,
        name="the sender recalls its own agent mail before any request claimed it")
    expire = Event(
        s.ACCEPTED.to(s.DISCARDED) | s.ADMITTED.to(s.DISCARDED) | s.RELEASED.to(s.DISCARDED),
        id=MessageTrigger.EXPIRE,
        name="agent mail left unclaimed longer than [messaging] message_ttl_seconds is "
        "dropped at the recipient's next boundary or reconcile")


class SessionLifecycle(StateMachine):
    """A session's runs. Residency of its in-memory actor is a separate flag, not a state."""

    s = States.from_enum(SessionState, initial=SessionState.IDLE)

    enqueue = Event(s.IDLE.to(s.QUEUED) | s.FINISHED.to(s.QUEUED), id=SessionTrigger.ENQUEUE,
                    name="a run is wanted: a first task, a user turn, or mail waking the "
                    "session")
    start = Event(s.QUEUED.to(s.RUNNING), id=SessionTrigger.START,
                  name="the queued run starts; mail waiting for the next run is bound to it")
    finish = Event(s.RUNNING.to(s.FINISHED), id=SessionTrigger.FINISH,
                   name="the run completed its task")
    interrupt = Event(s.RUNNING.to(s.IDLE) | s.QUEUED.to(s.IDLE), id=SessionTrigger.INTERRUPT,
                      name="the run (running or queued) was cancelled or found dead at restart")


class RunLifecycle(StateMachine):
    """One run of a session, from queued until it finished or was interrupted."""

    s = States.from_enum(RunState, initial=RunState.QUEUED,
                         final={RunState.FINISHED, RunState.INTERRUPTED})

    start = Event(s.QUEUED.to(s.RUNNING), id=RunTrigger.START, name="the queued run starts")
    finish = Event(s.RUNNING.to(s.FINISHED), id=RunTrigger.FINISH,
                   name="the run completed its task, between model requests")
    interrupt = Event(s.QUEUED.to(s.INTERRUPTED) | s.RUNNING.to(s.INTERRUPTED),
                      id=RunTrigger.INTERRUPT,
                      name="cancelled before or while running, or found dead at restart; an "
                      "open request is aborted first")


class RequestLifecycle(StateMachine):
    """The model request of a running run: at most one is open at a time."""

    s = States.from_enum(RequestState, initial=RequestState.NO_REQUEST)

    begin_request = Event(s.NO_REQUEST.to(s.REQUEST_OPEN), id=RequestTrigger.BEGIN_REQUEST,
                          name="a request opens at a safe boundary and claims the run's mail")
    commit_request = Event(s.REQUEST_OPEN.to(s.NO_REQUEST), id=RequestTrigger.COMMIT_REQUEST,
                           name="the request committed: its mail is consumed")
    abort_request = Event(s.REQUEST_OPEN.to(s.NO_REQUEST), id=RequestTrigger.ABORT_REQUEST,
                          name="the request did not commit: its mail is released")
    end = Event(s.NO_REQUEST.to.itself(), id=RequestTrigger.END,
                name="the run finishes or is interrupted; only between requests")


class ApprovalLifecycle(StateMachine):
    """A tool call an ``ask`` rule held, from pending until the user approves or denies it."""

    s = States.from_enum(ApprovalState, initial=ApprovalState.PENDING,
                         final={ApprovalState.APPROVED, ApprovalState.DENIED})

    approve = Event(s.PENDING.to(s.APPROVED), id=ApprovalTrigger.APPROVE,
                    name="the user approved the call for a scope; it runs in the same "
                    "transaction")
    deny = Event(s.PENDING.to(s.DENIED), id=ApprovalTrigger.DENY,
                 name="the user denied the call; it is answered with permission denied")


S = TypeVar("S", bound=enum.StrEnum)
T = TypeVar("T", bound=enum.StrEnum)


@attrs.frozen
class Lifecycle(Generic[S, T]):
    """A machine class flattened to a lookup table; stepping it is one dict access.

    States and triggers are the machine's ``StrEnum`` members; ``meanings`` holds what each
    trigger means, read off its ``Event``'s name."""

    name: str
    initial: S
    states: tuple[S, ...]
    final: frozenset[S]
    triggers: tuple[T, ...]
    meanings: Mapping[T, str]
    transitions: Mapping[tuple[S, T], S]

    @classmethod
    def derive(
        cls, machine: type[StateMachine], kind: type[S], trigger: type[T]
    ) -> Lifecycle[S, T]:
        """The table of ``machine``, whose states were declared by ``kind`` and whose triggers
        by ``trigger``; refuses a machine whose triggers are not exactly that enum's."""
        states = {state.id: kind(state.value) for state in machine.states}
        # The metaclass turns ``events`` into a class-level list; mypy sees the method.
        declared = cast("list[Event]", machine.events)
        if [e.id for e in declared] != [t.value for t in trigger]:
            raise ValueError(f"{machine.__name__} declares the triggers "
                             f"{[e.id for e in declared]}, not those of {trigger.__name__}")
        table: dict[tuple[S, T], S] = {}
        for state in machine.states:
            for transition in state.transitions:
                for event in transition.events:
                    table[(states[state.id], trigger(event.id))] = states[transition.target.id]
        return cls(
            name=machine.__name__,
            initial=next(states[s.id] for s in machine.states if s.initial),
            states=tuple(states.values()),
            final=frozenset(states[s.id] for s in machine.states if s.final),
            triggers=tuple(trigger),
            meanings={trigger(e.id): e.name for e in declared},
            transitions=table,
        )

    def step(self, subject: str, state: S, trigger: T) -> S:
        """The state after ``trigger``; raises ``IllegalTransition`` (and changes nothing) if
        none. The error lists the triggers the table allows from ``state``."""
        target = self.transitions.get((state, trigger))
        if target is None:
            raise IllegalTransition(subject, trigger, str(state), self.allowed(state))
        return target

    def allowed(self, state: S) -> tuple[T, ...]:
        return tuple(t for t in self.triggers if (state, t) in self.transitions)

    def is_final(self, state: S) -> bool:
        return state in self.final


MESSAGE = Lifecycle.derive(MessageLifecycle, MessageState, MessageTrigger)
SESSION = Lifecycle.derive(SessionLifecycle, SessionState, SessionTrigger)
RUN = Lifecycle.derive(RunLifecycle, RunState, RunTrigger)
REQUEST = Lifecycle.derive(RequestLifecycle, RequestState, RequestTrigger)
APPROVAL = Lifecycle.derive(ApprovalLifecycle, ApprovalState, ApprovalTrigger)
