"""The derived transition tables agree with the python-statemachine classes they came from."""

from __future__ import annotations

import enum
import itertools
from typing import Any, cast

import pytest
from statemachine import Event, StateMachine
from statemachine.exceptions import TransitionNotAllowed
from statemachine.states import States

from treemail.core.errors import IllegalTransition
from treemail.core.lifecycle import (
    APPROVAL,
    MESSAGE,
    REQUEST,
    RUN,
    SESSION,
    ApprovalLifecycle,
    ApprovalState,
    ApprovalTrigger,
    Lifecycle,
    MessageLifecycle,
    MessageState,
    MessageTrigger,
    RequestLifecycle,
    RequestTrigger,
    RunLifecycle,
    RunState,
    RunTrigger,
    SessionLifecycle,
    SessionState,
    SessionTrigger,
)

CASES = [(MESSAGE, MessageLifecycle), (SESSION, SessionLifecycle), (RUN, RunLifecycle),
         (REQUEST, RequestLifecycle), (APPROVAL, ApprovalLifecycle)]


def _fire(machine_class: type[StateMachine], state: str, event: str) -> str | None:
    """What the real machine does: the target state, or None when it refuses the event."""
    machine = machine_class(start_value=state)
    try:
        machine.send(event)
    except TransitionNotAllowed:
        return None
    return str(machine.current_state_value)


@pytest.mark.parametrize(("table", "machine_class"), CASES)
def test_table_agrees_with_machine_for_every_state_and_event(
    table: Lifecycle[Any, Any], machine_class: type[StateMachine]
) -> None:
    for state, event in itertools.product(table.states, table.triggers):
        if table.is_final(state):
            # A machine in a final state has terminated; the table must offer nothing there.
            assert table.allowed(state) == ()
            continue
        assert table.transitions.get((state, event)) == _fire(machine_class, state, event), (
            state,
            event,
        )


def test_message_lifecycle_matches_the_design_table() -> None:
    assert MESSAGE.transitions == {
        (MessageState.ACCEPTED, "admit"): MessageState.ADMITTED,
        (MessageState.ADMITTED, "claim"): MessageState.CLAIMED,
        (MessageState.RELEASED, "claim"): MessageState.CLAIMED,
        (MessageState.CLAIMED, "release"): MessageState.RELEASED,
        (MessageState.CLAIMED, "consume"): MessageState.CONSUMED,
        (MessageState.ACCEPTED, "discard"): MessageState.DISCARDED,
        (MessageState.ADMITTED, "discard"): MessageState.DISCARDED,
        (MessageState.RELEASED, "discard"): MessageState.DISCARDED,
        (MessageState.ACCEPTED, "cancel"): MessageState.DISCARDED,
        (MessageState.ADMITTED, "cancel"): MessageState.DISCARDED,
        (MessageState.RELEASED, "cancel"): MessageState.DISCARDED,
        (MessageState.ACCEPTED, "expire"): MessageState.DISCARDED,
        (MessageState.ADMITTED, "expire"): MessageState.DISCARDED,
        (MessageState.RELEASED, "expire"): MessageState.DISCARDED,
    }
    assert MESSAGE.final == {MessageState.CONSUMED, MessageState.DISCARDED}
    assert MESSAGE.initial == MessageState.ACCEPTED


def test_session_lifecycle_states() -> None:
    assert SESSION.states == (SessionState.IDLE, SessionState.QUEUED, SessionState.RUNNING,
                              SessionState.FINISHED)
    assert SESSION.initial == SessionState.IDLE
    assert SESSION.final == frozenset()


@pytest.mark.parametrize(
    ("state", "event"),
    [(MessageState.CLAIMED, MessageTrigger.DISCARD), (MessageState.CONSUMED, MessageTrigger.CLAIM),
     (MessageState.DISCARDED, MessageTrigger.ADMIT), (MessageState.ACCEPTED, MessageTrigger.CLAIM)],
)
def test_illegal_transition_names_subject_event_and_state(state: MessageState,
                                                          event: MessageTrigger) -> None:
    with pytest.raises(IllegalTransition) as caught:
        MESSAGE.step("message m1", state, event)
    error = caught.value
    assert (error.subject, error.event, error.state) == ("message m1", event, state)
    assert error.code == IllegalTransition.code
    assert "message m1" in str(error) and event in str(error) and state in str(error)


def test_run_lifecycle_states_and_steps() -> None:
    assert RUN.states == (RunState.QUEUED, RunState.RUNNING, RunState.FINISHED,
                          RunState.INTERRUPTED)
    assert RUN.initial is RunState.QUEUED
    assert RUN.final == {RunState.FINISHED, RunState.INTERRUPTED}
    assert RUN.allowed(RunState.QUEUED) == ("start", "interrupt")
    assert RUN.allowed(RunState.RUNNING) == ("finish", "interrupt")


def test_request_lifecycle_allows_one_open_request_and_ends_only_between_requests() -> None:
    assert REQUEST.allowed(REQUEST.initial) == ("begin_request", "end")
    opened = REQUEST.step("run r", REQUEST.initial, RequestTrigger.BEGIN_REQUEST)
    assert REQUEST.allowed(opened) == ("commit_request", "abort_request")
    with pytest.raises(IllegalTransition, match="only commit_request, abort_request"):
        REQUEST.step("run r", opened, RequestTrigger.END)


def test_tables_are_keyed_by_the_state_enums_and_plain_values_find_them() -> None:
    assert all(isinstance(s, MessageState) for s in MESSAGE.states)
    assert all(isinstance(s, SessionState) for s in SESSION.states)
    decoded = cast("MessageState", "accepted")  # plain text, as decoded: not the enum
    assert MESSAGE.step("m", decoded, MessageTrigger.ADMIT) is MessageState.ADMITTED


def test_named_predicates() -> None:
    assert {s for s in MessageState if s.pending} == {
        MessageState.ACCEPTED, MessageState.ADMITTED, MessageState.CLAIMED, MessageState.RELEASED}
    assert {s for s in MessageState if s.deliverable} == {MessageState.ADMITTED,
                                                          MessageState.RELEASED}
    assert {s for s in SessionState if s.has_run} == {SessionState.QUEUED, SessionState.RUNNING}


@pytest.mark.parametrize(("table", "machine_class"), CASES)
def test_each_trigger_means_what_its_event_declares(
    table: Lifecycle[Any, Any], machine_class: type[StateMachine]
) -> None:
    """The meaning spec/ prints is the ``name`` on the machine's ``Event``, for every trigger."""
    declared = {e.id: e.name for e in cast("list[Event]", machine_class.events)}
    assert dict(table.meanings) == declared
    assert set(table.meanings) == set(table.triggers)
    assert all(meaning and meaning != trigger for trigger, meaning in table.meanings.items())


class _Door(enum.StrEnum):
    SHUT = "shut"
    OPEN = "open"


class _DoorTrigger(enum.StrEnum):
    OPEN = "open_door"
    SHUT = "shut_door"


def test_derive_refuses_a_machine_whose_triggers_are_not_its_enum() -> None:
    class Door(StateMachine):
        s = States.from_enum(_Door, initial=_Door.SHUT)
        open_door = Event(s.SHUT.to(s.OPEN), id=_DoorTrigger.OPEN, name="someone opens it")
        slam = Event(s.OPEN.to(s.SHUT), id="slam", name="a draught shuts it")

    with pytest.raises(ValueError, match="declares the triggers"):
        Lifecycle.derive(Door, _Door, _DoorTrigger)


def test_run_triggers_name_the_session_trigger_they_move_with() -> None:
    assert {t: t.session for t in RunTrigger} == {
        RunTrigger.START: SessionTrigger.START, RunTrigger.FINISH: SessionTrigger.FINISH,
        RunTrigger.INTERRUPT: SessionTrigger.INTERRUPT}


def test_an_approval_is_answered_once() -> None:
    assert APPROVAL.initial is ApprovalState.PENDING
    assert APPROVAL.final == {ApprovalState.APPROVED, ApprovalState.DENIED}
    assert APPROVAL.step("approval a", ApprovalState.PENDING,
                         ApprovalTrigger.DENY) is ApprovalState.DENIED
    with pytest.raises(IllegalTransition, match="only no event is allowed"):
        APPROVAL.step("approval a", ApprovalState.APPROVED, ApprovalTrigger.DENY)
