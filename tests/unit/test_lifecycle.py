"""The derived transition tables agree with the python-statemachine classes they came from."""

from __future__ import annotations

import itertools
from typing import Any, cast

import pytest
from statemachine import StateMachine
from statemachine.exceptions import TransitionNotAllowed

from treemail.core.errors import IllegalTransition
from treemail.core.lifecycle import (
    MESSAGE,
    REQUEST,
    RUN,
    SESSION,
    Lifecycle,
    MessageLifecycle,
    MessageState,
    RequestLifecycle,
    RunLifecycle,
    RunState,
    SessionLifecycle,
    SessionState,
)

CASES = [(MESSAGE, MessageLifecycle), (SESSION, SessionLifecycle), (RUN, RunLifecycle),
         (REQUEST, RequestLifecycle)]


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
    table: Lifecycle[Any], machine_class: type[StateMachine]
) -> None:
    for state, event in itertools.product(table.states, table.events):
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
        ("accepted", "admit"): "admitted",
        ("admitted", "claim"): "claimed",
        ("released", "claim"): "claimed",
        ("claimed", "release"): "released",
        ("claimed", "consume"): "consumed",
        ("accepted", "discard"): "discarded",
        ("admitted", "discard"): "discarded",
        ("released", "discard"): "discarded",
    }
    assert MESSAGE.final == {"consumed", "discarded"}
    assert MESSAGE.initial == "accepted"


def test_session_lifecycle_states() -> None:
    assert SESSION.states == ("idle", "queued", "running", "finished")
    assert SESSION.initial == "idle"
    assert SESSION.final == frozenset()


@pytest.mark.parametrize(
    ("state", "event"),
    [(MessageState.CLAIMED, "discard"), (MessageState.CONSUMED, "claim"),
     (MessageState.DISCARDED, "admit"), (MessageState.ACCEPTED, "claim")],
)
def test_illegal_transition_names_subject_event_and_state(state: MessageState,
                                                          event: str) -> None:
    with pytest.raises(IllegalTransition) as caught:
        MESSAGE.step("message m1", state, event)
    error = caught.value
    assert (error.subject, error.event, error.state) == ("message m1", event, state)
    assert error.code == "lifecycle:illegal_transition"
    assert "message m1" in str(error) and event in str(error) and state in str(error)


def test_run_lifecycle_states_and_steps() -> None:
    assert RUN.states == ("queued", "running", "finished", "interrupted")
    assert RUN.initial is RunState.QUEUED
    assert RUN.final == {RunState.FINISHED, RunState.INTERRUPTED}
    assert RUN.allowed(RunState.QUEUED) == ("start", "interrupt")
    assert RUN.allowed(RunState.RUNNING) == ("finish", "interrupt")


def test_request_lifecycle_allows_one_open_request_and_ends_only_between_requests() -> None:
    assert REQUEST.allowed(REQUEST.initial) == ("begin_request", "end")
    opened = REQUEST.step("run r", REQUEST.initial, "begin_request")
    assert REQUEST.allowed(opened) == ("commit_request", "abort_request")
    with pytest.raises(IllegalTransition, match="only commit_request, abort_request"):
        REQUEST.step("run r", opened, "end")


def test_tables_are_keyed_by_the_state_enums_and_plain_values_find_them() -> None:
    assert all(isinstance(s, MessageState) for s in MESSAGE.states)
    assert all(isinstance(s, SessionState) for s in SESSION.states)
    decoded = cast("MessageState", "accepted")  # plain text, as decoded: not the enum
    assert MESSAGE.step("m", decoded, "admit") is MessageState.ADMITTED


def test_named_predicates() -> None:
    assert {s for s in MessageState if s.pending} == {"accepted", "admitted", "claimed",
                                                      "released"}
    assert {s for s in MessageState if s.deliverable} == {"admitted", "released"}
    assert {s for s in SessionState if s.has_run} == {"queued", "running"}
