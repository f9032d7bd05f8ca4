"""Theory of operation: the two lifecycles, declared once.

A message moves through ``MessageLifecycle``; a session through ``SessionLifecycle``. Both
are python-statemachine classes, so the library checks at class definition that every state
is reachable and that no non-final state is a trap.

Instantiating a machine per message costs about 150 µs per transition and several hundred
per instance, far too much for the send path. So at import time each class is flattened into
a ``Lifecycle`` table, ``{(state, event): target}``, and the engine steps records through that
table. The table is derived, never written by hand: a test fires every event of the real
machine class from every state and checks that it agrees with the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import attrs
from statemachine import State, StateMachine

from treemail.core.errors import IllegalTransition

__all__ = [
    "MESSAGE",
    "SESSION",
    "Lifecycle",
    "MessageLifecycle",
    "SessionLifecycle",
]


class MessageLifecycle(StateMachine):
    """A message from acceptance until it is consumed exactly once or discarded with a reason."""

    accepted = State("accepted", initial=True)
    admitted = State("admitted")
    claimed = State("claimed")
    released = State("released")
    consumed = State("consumed", final=True)
    discarded = State("discarded", final=True)

    # The recipient's actor took it into pending input: of the in-flight run or the next.
    admit = accepted.to(admitted)
    # Put into a model request built at a safe boundary, bound to (run, request).
    claim = admitted.to(claimed) | released.to(claimed)
    # That request did not commit (cancelled, model error, crash found at restart).
    release = claimed.to(released)
    # The request that carried it committed: it is in the transcript, exactly once.
    consume = claimed.to(consumed)
    # Dropped by an explicit decision, always with a reason. Never from claimed: a message
    # inside an open request is released first, so it cannot vanish from under a commit.
    discard = accepted.to(discarded) | admitted.to(discarded) | released.to(discarded)


class SessionLifecycle(StateMachine):
    """A session's runs. Residency of its in-memory actor is a separate flag, not a state."""

    idle = State("idle", initial=True)
    queued = State("queued")
    running = State("running")
    finished = State("finished")

    # A run is wanted: a first task, a user turn, or mail waking an idle or finished session.
    enqueue = idle.to(queued) | finished.to(queued)
    start = queued.to(running)
    # The run completed its task.
    finish = running.to(finished)
    # The run (or the queued run) was cancelled or found dead at restart.
    interrupt = running.to(idle) | queued.to(idle)


@attrs.frozen
class Lifecycle:
    """A machine class flattened to a lookup table; stepping it is one dict access."""

    name: str
    initial: str
    states: tuple[str, ...]
    final: frozenset[str]
    events: tuple[str, ...]
    transitions: Mapping[tuple[str, str], str]

    @classmethod
    def derive(cls, machine: type[StateMachine]) -> Lifecycle:
        table: dict[tuple[str, str], str] = {}
        for state in machine.states:
            for transition in state.transitions:
                for event in transition.events:
                    table[(state.id, event.id)] = transition.target.id
        return cls(
            name=machine.__name__,
            initial=next(s.id for s in machine.states if s.initial),
            states=tuple(s.id for s in machine.states),
            final=frozenset(s.id for s in machine.states if s.final),
            # The metaclass turns ``events`` into a class-level list; mypy sees the method.
            events=tuple(e.id for e in cast("list[Any]", machine.events)),
            transitions=table,
        )

    def step(self, subject: str, state: str, event: str) -> str:
        """The state after ``event``; raises ``IllegalTransition`` (and changes nothing) if none."""
        target = self.transitions.get((state, event))
        if target is None:
            raise IllegalTransition(subject, event, state, self.allowed(state))
        return target

    def allowed(self, state: str) -> tuple[str, ...]:
        return tuple(e for e in self.events if (state, e) in self.transitions)

    def is_final(self, state: str) -> bool:
        return state in self.final


MESSAGE = Lifecycle.derive(MessageLifecycle)
SESSION = Lifecycle.derive(SessionLifecycle)
