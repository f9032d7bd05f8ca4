"""Delivery as design.md "Delivery" fixes it: steer, queue, wake, races, release and recovery.

Every message is followed through the recipient's requests: where it is claimed, that it is
consumed exactly once, and what text the recipient's model sees.
"""

from __future__ import annotations

import attrs
import pytest

from tests.unit.conftest import World, arguments
from treemail.core.engine import Delivery, Request
from treemail.core.errors import (
    IllegalTransition,
    InvalidRequest,
    TreemailError,
    UnknownTarget,
)
from treemail.core.events import EventKind
from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.core.records import Mode, Owner, RecipientState, Session, ToolContext
from treemail.core.sending import send

PEER_RULES = {"parent": "allow", "child": "allow", "sibling": "allow"}


@attrs.frozen
class Pair:
    """A root that may message its child, and a child that may message its parent."""

    root: Session
    child: Session


@pytest.fixture
def pair(world: World) -> Pair:
    root = world.root("root", PEER_RULES)
    return Pair(root, world.child(root, "kid", PEER_RULES))


def _ids(request: Request) -> list[str]:
    return [d.message_id for d in request.deliveries]


def _agent_ids(request: Request) -> list[str]:
    return [d.message_id for d in request.deliveries if d.owner is Owner.AGENT]


def _begin(world: World, session: Session) -> Request:
    run = world.activate(session)
    return world.engine.begin_request(session.session_id, run.run_id)


def _commit(world: World, session: Session, request: Request) -> None:
    world.engine.commit_request(session.session_id, request.run_id, request.request_id)


def _abort(world: World, session: Session, request: Request) -> None:
    world.engine.abort_request(session.session_id, request.run_id, request.request_id)


def _state(world: World, message_id: str) -> str:
    return world.engine.message(message_id).state


def _times_delivered(world: World, session: Session, message_id: str) -> int:
    """How many committed requests carried the message (its Consumed events)."""
    return world.kinds(session, message_id).count(EventKind.PRODUCER_MESSAGE_CONSUMED)


def _busy(world: World, session: Session) -> None:
    """Start the session's run and consume what it has, leaving the run running and idle."""
    world.drain(session, finish=False)


# -- effective mode and recipient state ----------------------------------------------------


def test_steer_to_running_joins_the_next_boundary(world: World, pair: Pair) -> None:
    _busy(world, pair.child)
    run = world.activate(pair.child)
    sent = world.send(pair.root, pair.child, "look here", mode="steer")
    assert (sent.mode, sent.recipient_state) == (Mode.STEER, RecipientState.RUNNING)
    # A running recipient takes its mail in itself, at its next boundary: no wake commit.
    assert (_state(world, sent.message_id), world.engine.message(sent.message_id).run_id) == (
        MessageState.ACCEPTED, None)
    request = _begin(world, pair.child)
    assert (request.run_id, _ids(request)) == (run.run_id, [sent.message_id])
    assert _state(world, sent.message_id) == MessageState.CLAIMED


def test_steer_is_the_default_mode(world: World, pair: Pair) -> None:
    _busy(world, pair.child)
    sent = world.send(pair.root, pair.child)
    assert (sent.mode, sent.recipient_state) == (Mode.STEER, RecipientState.RUNNING)
    assert sent.as_tool_result() == {
        "message_id": sent.message_id, "mode": "steer", "recipient_state": RecipientState.RUNNING,
    }


def test_queue_to_running_waits_for_the_next_run(world: World, pair: Pair) -> None:
    _busy(world, pair.child)
    first = world.activate(pair.child)
    sent = world.send(pair.root, pair.child, mode="queue")
    assert (sent.mode, sent.recipient_state) == (Mode.QUEUE, RecipientState.RUNNING)
    for _ in range(2):
        request = _begin(world, pair.child)
        assert _ids(request) == []
        _commit(world, pair.child, request)
    assert _state(world, sent.message_id) == MessageState.ADMITTED
    world.engine.finish_run(pair.child.session_id, first.run_id)
    assert world.fresh(pair.child).state == SessionState.QUEUED
    second = world.engine.start_run(pair.child.session_id)
    assert second.number == first.number + 1
    request = world.engine.begin_request(pair.child.session_id, second.run_id)
    assert _ids(request) == [sent.message_id]


@pytest.mark.parametrize("mode", ["steer", "queue"])
def test_to_a_queued_recipient_it_is_claimed_at_run_start(
    world: World, pair: Pair, mode: str
) -> None:
    assert world.fresh(pair.child).state == SessionState.QUEUED
    sent = world.send(pair.root, pair.child, mode=mode)
    assert (sent.mode, sent.recipient_state) == (Mode.QUEUE, RecipientState.QUEUED)
    assert world.engine.message(sent.message_id).run_id is None
    request = _begin(world, pair.child)
    assert request.deliveries[0].owner is Owner.DELEGATION
    assert _agent_ids(request) == [sent.message_id]


def test_to_an_idle_recipient_it_queues_a_run(world: World, pair: Pair) -> None:
    assert world.fresh(pair.root).state == SessionState.IDLE
    sent = world.send(pair.child, pair.root, mode="steer")
    assert (sent.mode, sent.recipient_state) == (Mode.QUEUE, RecipientState.QUEUED)
    assert world.fresh(pair.root).state == SessionState.QUEUED
    assert _ids(_begin(world, pair.root)) == [sent.message_id]


@pytest.mark.parametrize("mode", ["steer", "queue"])
def test_a_finished_recipient_is_woken_with_the_message(
    world: World, pair: Pair, mode: str
) -> None:
    world.drain(pair.child)
    finished = world.fresh(pair.child)
    assert finished.state == SessionState.FINISHED and finished.run_id is None
    sent = world.send(pair.root, pair.child, "one more thing", mode=mode)
    assert (sent.mode, sent.recipient_state) == (Mode.QUEUE, RecipientState.WAKING_FINISHED)
    woken = world.fresh(pair.child)
    assert woken.state == SessionState.QUEUED and woken.run_id is not None
    assert world.engine.run(woken.run_id).number == 2
    last = world.engine.events(pair.child.session_id)[-1]
    assert (last.kind, last.data["reason"]) == (EventKind.RUN_QUEUED, "wake")
    request = _begin(world, pair.child)
    assert request.run_id == woken.run_id
    assert _ids(request) == [sent.message_id]


def test_a_steer_that_loses_the_race_with_completion_goes_to_the_next_run(
    world: World, pair: Pair
) -> None:
    _busy(world, pair.child)
    first = world.activate(pair.child)
    sent = world.send(pair.root, pair.child, mode="steer")
    assert sent.mode is Mode.STEER
    world.engine.finish_run(pair.child.session_id, first.run_id)  # before the next boundary
    assert world.engine.message(sent.message_id).run_id is None
    assert world.fresh(pair.child).state == SessionState.QUEUED
    request = _begin(world, pair.child)
    assert request.run_id != first.run_id
    assert _ids(request) == [sent.message_id]
    _commit(world, pair.child, request)
    assert _times_delivered(world, pair.child, sent.message_id) == 1


# -- release, cancel, crash ------------------------------------------------------------------


def test_abort_releases_for_the_next_boundary_and_it_is_consumed_once(
    world: World, pair: Pair
) -> None:
    _busy(world, pair.child)
    sent = world.send(pair.root, pair.child)
    request = _begin(world, pair.child)
    _abort(world, pair.child, request)
    assert _state(world, sent.message_id) == MessageState.RELEASED
    again = _begin(world, pair.child)
    assert again.request_id != request.request_id
    assert _ids(again) == [sent.message_id]
    _commit(world, pair.child, again)
    assert _state(world, sent.message_id) == MessageState.CONSUMED
    assert _ids(_begin(world, pair.child)) == []
    assert world.kinds(pair.child, sent.message_id) == [
        EventKind.PRODUCER_MESSAGE_ACCEPTED, EventKind.PRODUCER_MESSAGE_ADMITTED,
        EventKind.PRODUCER_MESSAGE_CLAIMED, EventKind.PRODUCER_MESSAGE_RELEASED,
        EventKind.PRODUCER_MESSAGE_CLAIMED, EventKind.PRODUCER_MESSAGE_CONSUMED,
    ]


def test_cancel_with_an_open_request_releases_to_the_next_run(
    world: World, pair: Pair
) -> None:
    _busy(world, pair.child)
    run = world.activate(pair.child)
    sent = world.send(pair.root, pair.child)
    _begin(world, pair.child)
    world.engine.cancel_run(pair.child.session_id, run.run_id)
    assert world.engine.run(run.run_id).status is RunState.INTERRUPTED
    message = world.engine.message(sent.message_id)
    assert (message.state, message.run_id, message.request_id) == (
        MessageState.RELEASED, None, None)
    assert world.fresh(pair.child).state == SessionState.QUEUED
    request = _begin(world, pair.child)
    assert _ids(request) == [sent.message_id]
    _commit(world, pair.child, request)
    assert _times_delivered(world, pair.child, sent.message_id) == 1


def test_recover_releases_interrupts_and_wakes(world: World, pair: Pair) -> None:
    _busy(world, pair.child)
    run = world.activate(pair.child)
    sent = world.send(pair.root, pair.child)
    _begin(world, pair.child)  # ... and the process dies with the request open
    engine = world.restart()
    assert engine.recover() == 2  # the child's run and the root's (woken by user mail)
    assert engine.run(run.run_id).status is RunState.INTERRUPTED
    assert _state(world, sent.message_id) == MessageState.RELEASED
    kinds = [e.kind for e in engine.events(pair.child.session_id)]
    assert kinds[-4:] == [
        EventKind.PRODUCER_MESSAGE_RELEASED, EventKind.REQUEST_ABORTED, EventKind.RUN_INTERRUPTED,
        EventKind.RUN_QUEUED,
    ]
    request = _begin(world, pair.child)
    assert _ids(request) == [sent.message_id]
    _commit(world, pair.child, request)
    assert _times_delivered(world, pair.child, sent.message_id) == 1
    assert world.consume_all(pair.child) == []


def test_recover_twice_changes_nothing_more(world: World, pair: Pair) -> None:
    _busy(world, pair.child)
    world.send(pair.root, pair.child)
    _begin(world, pair.child)
    world.restart().recover()
    before = world.snapshot()
    assert world.restart().recover() == 0
    assert world.snapshot() == before


def _accept_only(world: World, ctx: ToolContext, recipient: Session) -> str:
    """The send's transaction commits, then the process dies before the recipient admits."""
    engine = world.engine
    sent = world.store.transact(
        lambda tx: send(tx, engine.config, engine.ids, ctx, arguments(recipient))
    )
    return sent.result.message_id


def test_mail_accepted_before_a_crash_is_delivered_after_recover(
    world: World, pair: Pair
) -> None:
    world.drain(pair.child)
    message_id = _accept_only(world, world.ctx(pair.root), pair.child)
    assert _state(world, message_id) == MessageState.ACCEPTED
    assert world.fresh(pair.child).state == SessionState.FINISHED
    world.restart().recover()
    assert _state(world, message_id) == MessageState.ADMITTED
    assert world.fresh(pair.child).state == SessionState.QUEUED
    delivered = world.consume_all(pair.child)
    assert [d.message_id for d in delivered] == [message_id]


def test_consumed_mail_is_never_delivered_again(world: World, pair: Pair) -> None:
    sent = world.send(pair.root, pair.child)
    assert sent.message_id in [d.message_id for d in world.consume_all(pair.child)]
    world.restart().recover()
    world.engine.accept(pair.child.session_id, "next task", Owner.USER)
    assert [d.owner for d in world.consume_all(pair.child)] == [Owner.USER]
    assert _times_delivered(world, pair.child, sent.message_id) == 1
    assert world.pending_agent_mail(pair.child) == 0


# -- discard ---------------------------------------------------------------------------------


def _discard_and_check(world: World, recipient: Session, message_id: str) -> None:
    before = world.pending_agent_mail(recipient)
    world.engine.discard(message_id, "operator: obsolete")
    message = world.engine.message(message_id)
    assert (message.state, message.reason) == (MessageState.DISCARDED, "operator: obsolete")
    last = world.engine.events(recipient.session_id)[-1]
    assert last.kind == EventKind.PRODUCER_MESSAGE_DISCARDED
    assert (last.data["message_id"], last.data["reason"]) == (message_id, "operator: obsolete")
    assert world.pending_agent_mail(recipient) == before - 1
    assert message_id not in [d.message_id for d in world.consume_all(recipient)]


def test_discard_from_accepted(world: World, pair: Pair) -> None:
    message_id = _accept_only(world, world.ctx(pair.root), pair.child)
    assert _state(world, message_id) == MessageState.ACCEPTED
    _discard_and_check(world, pair.child, message_id)


def test_discard_from_admitted(world: World, pair: Pair) -> None:
    sent = world.send(pair.root, pair.child)
    world.engine.reconcile(pair.child.session_id)  # the recipient takes it in
    assert _state(world, sent.message_id) == MessageState.ADMITTED
    _discard_and_check(world, pair.child, sent.message_id)


def test_discard_from_released(world: World, pair: Pair) -> None:
    _busy(world, pair.child)
    sent = world.send(pair.root, pair.child)
    _abort(world, pair.child, _begin(world, pair.child))
    assert _state(world, sent.message_id) == MessageState.RELEASED
    _discard_and_check(world, pair.child, sent.message_id)


def _refuse_discard(world: World, message_id: str, reason: str, code: str) -> None:
    before = world.snapshot()
    with pytest.raises(TreemailError) as caught:
        world.engine.discard(message_id, reason)
    assert caught.value.code == code
    assert world.snapshot() == before


def test_discard_of_a_claimed_message_is_illegal_and_changes_nothing(
    world: World, pair: Pair
) -> None:
    _busy(world, pair.child)
    sent = world.send(pair.root, pair.child)
    request = _begin(world, pair.child)
    with pytest.raises(IllegalTransition) as caught:
        world.engine.discard(sent.message_id, "too late")
    assert (caught.value.event, caught.value.state) == ("discard", MessageState.CLAIMED)
    _refuse_discard(world, sent.message_id, "too late", IllegalTransition.code)
    _commit(world, pair.child, request)
    assert _state(world, sent.message_id) == MessageState.CONSUMED
    _refuse_discard(world, sent.message_id, "after the fact", IllegalTransition.code)


def test_discard_needs_a_reason_and_a_message(world: World, pair: Pair) -> None:
    sent = world.send(pair.root, pair.child)
    _refuse_discard(world, sent.message_id, "  ", InvalidRequest.code)
    _refuse_discard(world, "no-such-message", "why", UnknownTarget.code)
    assert _state(world, sent.message_id) == MessageState.ACCEPTED


# -- idempotent retries ----------------------------------------------------------------------


def test_a_retried_tool_call_returns_the_original_and_delivers_once(
    world: World, pair: Pair
) -> None:
    ctx = world.ctx(pair.root)
    first = world.engine.send_message(ctx, arguments(pair.child, "hi"))
    again = world.engine.send_message(ctx, arguments(pair.child, "hi"))
    assert again == first
    assert [m.message_id for m in world.engine.pending(pair.child.session_id)
            if m.owner is Owner.AGENT] == [first.message_id]
    assert _agent_ids_of(world.consume_all(pair.child)) == [first.message_id]


def test_a_retry_after_recover_returns_the_original(world: World, pair: Pair) -> None:
    ctx = world.ctx(pair.root)
    first = world.engine.send_message(ctx, arguments(pair.child, "hi"))
    engine = world.restart()
    engine.recover()
    assert world.engine.run(ctx.run_id).status is RunState.INTERRUPTED
    assert engine.send_message(ctx, arguments(pair.child, "hi")) == first
    assert _agent_ids_of(world.consume_all(pair.child)) == [first.message_id]
    assert _times_delivered(world, pair.child, first.message_id) == 1


def _agent_ids_of(deliveries: list[Delivery]) -> list[str]:
    return [d.message_id for d in deliveries if d.owner is Owner.AGENT]


# -- what the recipient sees -----------------------------------------------------------------


def _text(world: World, sender: Session, recipient: Session, body: str) -> str:
    sent = world.send(sender, recipient, body)
    (delivery,) = [d for d in world.consume_all(recipient) if d.message_id == sent.message_id]
    return delivery.text


def test_envelope_with_reply_hint_when_the_recipient_can_send(world: World, pair: Pair) -> None:
    handle = pair.root.handle
    assert handle is not None
    assert _text(world, pair.root, pair.child, "line 1\nline 2") == (
        f'<agent_message from="{handle}">\nline 1\nline 2\n\n'
        f'[use `send_message(to="{handle}", ...)` to reply]\n</agent_message>'
    )


@pytest.mark.parametrize("rules", [{}, {"*": "deny"}])
def test_envelope_without_hint_when_the_tool_is_hidden(
    world: World, rules: dict[str, str]
) -> None:
    root = world.root("boss", PEER_RULES)
    mute = world.child(root, "mute", rules)
    assert world.engine.tool_visible(mute.session_id) is False
    assert _text(world, root, mute, "do it") == (
        f'<agent_message from="{root.handle}">\ndo it\n</agent_message>'
    )


def test_envelope_names_a_legacy_sender_by_uuid(world: World) -> None:
    old = world.root("old", PEER_RULES, legacy=True)
    kid = world.child(old, "kid", PEER_RULES)
    assert _text(world, old, kid, "hi") == (
        f'<agent_message from="{old.session_id}">\nhi\n\n'
        f'[use `send_message(to="{old.session_id}", ...)` to reply]\n</agent_message>'
    )


def test_the_body_is_kept_exactly_and_metadata_stays_out(world: World, pair: Pair) -> None:
    body = "  <b>é€😀</b>\n\n  trailing  "
    text = _text(world, pair.root, pair.child, body)
    assert f"\n{body}\n" in text
    assert pair.root.session_id not in text
    assert "hop" not in text


def test_non_agent_mail_is_delivered_bare(world: World, pair: Pair) -> None:
    world.engine.accept(pair.child.session_id, "plugin says hi", Owner.PLUGIN)
    texts = {d.owner: d.text for d in world.consume_all(pair.child)}
    assert texts == {Owner.DELEGATION: "task for kid", Owner.PLUGIN: "plugin says hi"}


# -- the event log ---------------------------------------------------------------------------


def test_event_kinds_of_one_message_in_order(world: World, pair: Pair) -> None:
    sent = world.send(pair.root, pair.child, "logged")
    world.consume_all(pair.child)
    assert world.kinds(pair.child, sent.message_id) == [
        EventKind.PRODUCER_MESSAGE_ACCEPTED,
        EventKind.PRODUCER_MESSAGE_ADMITTED,
        EventKind.PRODUCER_MESSAGE_CLAIMED,
        EventKind.PRODUCER_MESSAGE_CONSUMED,
    ]
    accepted = next(
        e for e in world.engine.events(pair.child.session_id)
        if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED and e.data["message_id"] == sent.message_id
    )
    assert accepted.data["owner"] == "agent"
    assert accepted.data["sender"] == pair.root.session_id
    assert (accepted.data["agent_hop"], accepted.data["body"]) == (1, "logged")
    assert world.kinds(pair.root, sent.message_id) == []
