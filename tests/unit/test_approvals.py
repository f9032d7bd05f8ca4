"""Approvals (ask rules), reverted branches (ghost sessions) and the global event feed."""

from __future__ import annotations

import typing

import pytest

from tests.unit.conftest import World, arguments
from treemail.adapters.ui import cli
from treemail.core.approvals import REASON_LIMIT, SCOPES
from treemail.core.errors import (
    ApprovalRequired,
    InboxFull,
    InvalidRequest,
    PermissionDenied,
    UnknownApproval,
    UnknownSubagentReference,
)
from treemail.core.records import ApprovalState, GrantScope, Session, ToolContext
from treemail.protocol import structs as wire

ASK_SIBLING = {"sibling": "ask", "parent": "allow"}


def _siblings(world: World) -> tuple[Session, Session, Session]:
    root = world.root("root", {"child": "allow"})
    return root, world.child(root, "a", ASK_SIBLING), world.child(root, "b", ASK_SIBLING)


def _held(world: World, ctx: ToolContext, to: Session, body: str = "hi") -> str:
    args = arguments(to, body)
    with pytest.raises(ApprovalRequired) as caught:
        world.engine.send_message(ctx, args)
    label = str(caught.value.details["label"])
    return world.engine.hold_for_approval(ctx, "send_message", args, label).approval_id


def test_held_call_is_listed_and_holding_twice_finds_the_same_approval(world: World) -> None:
    _, a, b = _siblings(world)
    ctx = world.ctx(a)
    approval_id = _held(world, ctx, b)
    again = world.engine.hold_for_approval(ctx, "send_message", arguments(b), "sibling")
    assert again.approval_id == approval_id
    [pending] = world.engine.approvals()
    assert (pending.state, pending.label, pending.context) == (
        ApprovalState.PENDING, "sibling", ctx)
    assert world.pending_agent_mail(b) == 0


def test_approve_once_sends_now_and_the_retry_replays_it(world: World) -> None:
    _, a, b = _siblings(world)
    ctx = world.ctx(a)
    answered = world.engine.answer_approval(_held(world, ctx, b), approve=True, scope="once")
    assert answered.outcome is not None
    outcome = answered.outcome.as_result()
    assert answered.state is ApprovalState.APPROVED and set(outcome) == {
        "message_id", "mode", "recipient_state"}
    assert world.engine.send_message(ctx, arguments(b, "hi")).message_id == outcome["message_id"]
    assert world.pending_agent_mail(b) == 1
    # A once-grant was spent by that one call: the next call asks again.
    with pytest.raises(ApprovalRequired):
        world.send(a, b, "second")
    assert world.engine.approvals() == []


@pytest.mark.parametrize("scope", ["session", "tree"])
def test_wider_scopes_let_later_calls_through(world: World, scope: str) -> None:
    _, a, b = _siblings(world)
    world.engine.answer_approval(_held(world, world.ctx(a), b), approve=True, scope=scope)
    world.send(a, b, "later")
    assert world.pending_agent_mail(b) == 2
    if scope == "tree":  # the sibling's own sends to its peers are covered too
        world.send(b, a, "back")
    else:
        with pytest.raises(ApprovalRequired):
            world.send(b, a, "back")


def test_denial_answers_with_the_generic_permission_error(world: World) -> None:
    _, a, b = _siblings(world)
    answered = world.engine.answer_approval(_held(world, world.ctx(a), b), approve=False)
    assert answered.outcome is not None
    assert answered.state is ApprovalState.DENIED
    assert answered.outcome.as_result()["error"] == PermissionDenied.code
    assert world.pending_agent_mail(b) == 0
    with pytest.raises(UnknownApproval):
        world.engine.answer_approval(answered.approval_id, approve=True)


def test_a_denial_tells_the_agent_the_users_reason(world: World) -> None:
    _, a, b = _siblings(world)
    answered = world.engine.answer_approval(_held(world, world.ctx(a), b), approve=False,
                                            reason="ask the parent instead")
    assert answered.outcome is not None and answered.state is ApprovalState.DENIED
    result = answered.outcome.as_result()
    assert result["error"] == PermissionDenied.code
    assert result["message"].endswith("the user said: ask the parent instead")
    assert world.pending_agent_mail(b) == 0


def test_a_reason_goes_only_with_a_short_enough_deny(world: World) -> None:
    _, a, b = _siblings(world)
    ctx = world.ctx(a)
    approval_id = _held(world, ctx, b)
    before = world.snapshot(ctx)
    with pytest.raises(InvalidRequest, match="goes with a deny"):
        world.engine.answer_approval(approval_id, approve=True, reason="fine")
    with pytest.raises(InvalidRequest, match="at most"):
        world.engine.answer_approval(approval_id, approve=False,
                                     reason="x" * (REASON_LIMIT + 1))
    assert world.snapshot(ctx) == before
    assert [p.approval_id for p in world.engine.approvals()] == [approval_id]


def test_approval_answered_after_restart_sends_exactly_once(world: World) -> None:
    _, a, b = _siblings(world)
    ctx = world.ctx(a)
    approval_id = _held(world, ctx, b)
    engine = world.restart()
    assert engine.recover() >= 1  # a's run died with the process
    assert [p.approval_id for p in engine.approvals()] == [approval_id]
    answered = engine.answer_approval(approval_id, approve=True, scope="once")
    assert answered.outcome is not None
    sent = answered.outcome.as_result()["message_id"]
    delivered = world.consume_all(b)
    assert [d.message_id for d in delivered].count(sent) == 1


def test_approval_refused_by_a_later_guard_records_that_outcome(world: World) -> None:
    root, a, b = _siblings(world)
    world.configure(max_pending_per_session=1)
    approval_id = _held(world, world.ctx(a), b)
    world.send(root, b, "the parent fills the inbox while the call waits")
    answered = world.engine.answer_approval(approval_id, approve=True, scope="once")
    assert answered.outcome is not None
    assert answered.state is ApprovalState.APPROVED
    assert answered.outcome.as_result()["error"] == InboxFull.code
    assert world.pending_agent_mail(b) == 1


def test_bad_answers_change_nothing(world: World) -> None:
    _, a, b = _siblings(world)
    ctx = world.ctx(a)
    approval_id = _held(world, ctx, b)
    before = world.snapshot(ctx)
    with pytest.raises(InvalidRequest):
        world.engine.answer_approval(approval_id, approve=True, scope="forever")
    with pytest.raises(UnknownApproval):
        world.engine.answer_approval("no/such/call", approve=True)
    assert world.snapshot(ctx) == before


def test_reverted_branch_is_reachable_by_uuid_not_by_handle(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kept = world.child(root, "kept", {"*": "allow"})
    gone = world.child(root, "gone", {"*": "allow"})
    grandchild = world.child(gone, "deep", {"*": "allow"})
    assert set(world.engine.revert(gone.session_id)) == {gone.session_id, grandchild.session_id}
    with pytest.raises(UnknownSubagentReference) as caught:
        world.send(kept, gone.reference)
    # Candidates: every live peer but the sender; never the ghosts.
    assert caught.value.details["candidates"] == [root.session_id]
    assert grandchild.reference not in caught.value.message
    world.send(kept, gone.session_id)  # the contract's accepted limitation
    assert world.engine.revert(gone.session_id) == []  # already ghosts: nothing to do


def test_feed_interleaves_every_session_in_commit_order(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    child = world.child(root, "kid", {"*": "allow"})
    world.send(child, root, "up")
    feed = world.engine.feed()
    assert [n for n, _ in feed] == list(range(1, len(feed) + 1))
    per_session = {
        s.session_id: [e for _, e in feed if e.session_id == s.session_id]
        for s in (root, child)
    }
    for session_id, events in per_session.items():
        assert events == world.engine.events(session_id)
    assert world.engine.feed(after=len(feed) - 1) == feed[-1:]


def test_grant_scopes_are_spelled_once(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wire's ``Scope``, the CLI's ``--scope`` choices and the refusals all read the one
    ``GrantScope``; the refusals still list the scopes in their words."""
    assert typing.get_args(wire.Scope) == SCOPES == tuple(GrantScope)
    with pytest.raises(SystemExit):
        cli.main(["approve", "a/r/c", "--scope", "forever"])
    assert "(choose from 'once', 'session', 'tree')" in capsys.readouterr().err
    with pytest.raises(InvalidRequest) as caught:
        world.engine.grant("forever", "s", "parent")
    assert caught.value.message == "grant scope must be once, session or tree, not 'forever'"
