"""Every ``send_message`` refusal at its boundary, in the design's guard order.

Every refusal goes through ``_refused``, which also proves the store is exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping

import attrs
import pytest

from tests.unit.conftest import World, arguments
from treemail.core import keys, sending
from treemail.core.errors import (
    ApprovalRequired,
    EngineShutdown,
    IdempotencyConflict,
    InboxFull,
    InflightFull,
    InvalidArguments,
    InvalidBody,
    InvalidRequest,
    InvalidToolContext,
    MaxHopsExceeded,
    MessagingDisabled,
    NotTreePeer,
    PermissionDenied,
    SelfSend,
    TreemailError,
    UnknownSession,
    UnknownSubagentReference,
)
from treemail.core.guards import SendArguments
from treemail.core.keys import CounterName
from treemail.core.lifecycle import RunState, SessionState
from treemail.core.records import GrantScope, Mode, Owner, RecipientState, Session, ToolContext
from treemail.core.sending import (
    Attempt,
    _check_permission,
    arguments_digest,
    current_rules,
    grant_counter,
)
from treemail.core.store import WriteTxn


@pytest.fixture(autouse=True, params=["one function", "guard by guard"])
def guard_runner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here runs twice: through the contract's guards written out as one function
    (what a send runs), and guard by guard from ``GUARDS`` (what a send runs when a tuple
    other than the contract's is in place), so the two cannot drift apart."""
    if request.param == "guard by guard":
        # A copy (``tuple`` of a tuple is the tuple itself): the same guards, not the
        # contract's own tuple.
        monkeypatch.setattr(sending, "GUARDS", tuple(list(sending.GUARDS)))
        assert sending.GUARDS is not sending._CONTRACT


PEER_RULES = {"parent": "allow", "sibling": "allow", "child": "allow"}
UNKNOWN_UUID = "12345678-9abc-4def-8123-456789abcdef"


@attrs.frozen
class Family:
    """A root with children ``a`` and ``b``; everyone may message parent, child and sibling."""

    root: Session
    a: Session
    b: Session


@pytest.fixture
def fam(world: World) -> Family:
    root = world.root("root", PEER_RULES)
    return Family(root, world.child(root, "a", PEER_RULES), world.child(root, "b", PEER_RULES))


def _refused(
    world: World, sender: Session | ToolContext, args: object, code: str
) -> TreemailError:
    """Assert the send fails with ``code`` and leaves the store exactly as it was."""
    ctx = sender if isinstance(sender, ToolContext) else world.ctx(sender)
    before = world.snapshot(ctx)
    with pytest.raises(TreemailError) as caught:
        world.engine.send_message(ctx, args)
    assert caught.value.code == code, str(caught.value)
    assert world.snapshot(ctx) == before
    return caught.value


def _counter(world: World, name: str) -> int:
    with world.store.read() as tx:
        return tx.count(CounterName(name))


# -- 1 disabled ------------------------------------------------------------------------------


def test_disabled_even_when_rules_allow(world: World, fam: Family) -> None:
    world.set_rules(fam.root, {"*": "allow"})
    world.configure(enabled=False)
    _refused(world, fam.root, arguments(fam.a), MessagingDisabled.code)


def test_disabled_beats_invalid_arguments(world: World, fam: Family) -> None:
    world.configure(enabled=False)
    _refused(world, fam.root, "not an object", MessagingDisabled.code)
    _refused(world, fam.root, {"recipient_session_id": fam.a.session_id, "body": "x"},
             MessagingDisabled.code)


# -- 2 invalid_arguments ---------------------------------------------------------------------


def _fill(template: Mapping[str, object], reference: str) -> dict[str, object]:
    return {key: reference if value == "@to" else value for key, value in template.items()}


BAD_ARGUMENTS: list[Mapping[str, object]] = [
    {"body": "hello"},
    {"to": "@to"},
    {},
    {"to": "@to", "body": "hello", "extra": 1},
    {"to": "@to", "body": "hello", "mode": "steer", "priority": "high"},
    {"to": 5, "body": "hello"},
    {"to": None, "body": "hello"},
    {"to": "", "body": "hello"},
    {"to": ["@to"], "body": "hello"},
    {"to": "@to", "body": 5},
    {"to": "@to", "body": None},
    {"to": "@to", "body": ["hello"]},
    {"to": "@to", "body": "hello", "mode": "broadcast"},
    {"to": "@to", "body": "hello", "mode": "STEER"},
    {"to": "@to", "body": "hello", "mode": None},
    {"to": "@to", "body": "hello", "mode": 1},
]


@pytest.mark.parametrize("template", BAD_ARGUMENTS, ids=repr)
def test_invalid_arguments(world: World, fam: Family, template: Mapping[str, object]) -> None:
    _refused(world, fam.root, _fill(template, fam.a.reference), InvalidArguments.code)


@pytest.mark.parametrize("args", ["to=a body=x", ["a", "x"], None, 42, ("to", "body")], ids=repr)
def test_arguments_must_be_an_object(world: World, fam: Family, args: object) -> None:
    _refused(world, fam.root, args, InvalidArguments.code)


@pytest.mark.parametrize("with_to", [False, True])
def test_recipient_session_id_is_rejected_with_a_hint(
    world: World, fam: Family, with_to: bool
) -> None:
    args: dict[str, object] = {"recipient_session_id": fam.a.session_id, "body": "hello"}
    if with_to:
        args["to"] = fam.a.session_id
    error = _refused(world, fam.root, args, InvalidArguments.code)
    assert "recipient_session_id" in error.message
    assert "`to`" in error.message


def test_both_modes_are_accepted(world: World, fam: Family) -> None:
    for mode in ("steer", "queue"):
        assert world.send(fam.root, fam.a, mode=mode).mode is Mode.QUEUE  # a is only queued


# -- 3 invalid_body --------------------------------------------------------------------------


@pytest.mark.parametrize("body", ["", " ", "\n\t  \r\n", "\u3000"], ids=repr)
def test_empty_or_whitespace_body(world: World, fam: Family, body: str) -> None:
    _refused(world, fam.root, arguments(fam.a, body), InvalidBody.code)


# Each pair is (exactly 10 UTF-8 bytes, 11 bytes), built from 2-, 3- and 4-byte characters.
BODY_BOUNDARIES = [
    ("é" * 5, "é" * 5 + "a"),
    ("€" * 3 + "a", "€" * 3 + "é"),
    ("😀" * 2 + "ab", "😀" * 2 + "abc"),
    ("a" * 10, "a" * 11),
    ("😀é€a", "😀é€ab"),
]


@pytest.mark.parametrize(("fits", "over"), BODY_BOUNDARIES, ids=repr)
def test_body_size_boundary_counts_utf8_bytes(
    world: World, fam: Family, fits: str, over: str
) -> None:
    world.configure(max_body_bytes=10)
    assert (len(fits.encode()), len(over.encode())) == (10, 11)
    error = _refused(world, fam.root, arguments(fam.a, over), InvalidBody.code)
    assert error.details == {"size": 11, "limit": 10}
    sent = world.send(fam.root, fam.a, fits)
    assert world.engine.message(sent.message_id).body == fits


@pytest.mark.parametrize("body", ["\ud800", "ok \udfff ok", "\udc00\ud800"], ids=repr)
def test_lone_surrogate_body(world: World, fam: Family, body: str) -> None:
    _refused(world, fam.root, arguments(fam.a, body), InvalidBody.code)


# -- 4 recipient resolution ------------------------------------------------------------------


def test_unknown_session(world: World, fam: Family) -> None:
    error = _refused(world, fam.root, arguments(UNKNOWN_UUID), UnknownSession.code)
    assert error.details == {"session_id": UNKNOWN_UUID}
    _refused(world, fam.root, arguments(UNKNOWN_UUID.upper()), UnknownSession.code)


def test_not_tree_peer(world: World, fam: Family) -> None:
    other = world.root("other", PEER_RULES)
    other_child = world.child(other, "oc", PEER_RULES)
    for target in (other, other_child):
        _refused(world, fam.a, arguments(target.session_id), NotTreePeer.code)
        _refused(world, other_child, arguments(fam.a.session_id), NotTreePeer.code)


def test_same_root_is_accepted_by_uuid_at_any_distance(world: World, fam: Family) -> None:
    """Tree peers are exactly the sessions sharing the sender's root_session_id."""
    grandchild = world.child(fam.a, "g", {"*": "allow", **PEER_RULES})
    for sender, recipient in ((fam.a, fam.b), (fam.b, fam.root), (grandchild, fam.root),
                              (grandchild, fam.b), (fam.root, grandchild)):
        assert sender.root_session_id == recipient.root_session_id
        if sender is fam.root:
            world.set_rules(fam.root, {"*": "allow", **PEER_RULES})
        sent = world.send(sender, recipient.session_id)
        assert world.engine.message(sent.message_id).recipient == recipient.session_id


def test_uuid_is_case_insensitive(world: World, fam: Family) -> None:
    sent = world.send(fam.root, fam.a.session_id.upper())
    assert world.engine.message(sent.message_id).recipient == fam.a.session_id


def _line(world: World, peer: Session) -> str:
    peer = world.fresh(peer)
    description = peer.agent.description
    if peer.handle is None:
        return f"- {peer.session_id} — {description} — {peer.state}"
    return f"- {peer.handle} — {description} — {peer.state} (session_id {peer.session_id})"


def test_unknown_handle_lists_every_other_live_peer_of_the_tree(world: World) -> None:
    root = world.root("root", PEER_RULES, description="plans the work")
    a = world.child(root, "a", PEER_RULES)
    b = world.child(root, "b", description="reviews")
    a1 = world.child(a, "a1")
    old = world.child(root, "old", description="from before handles", legacy=True)
    other = world.root("other")
    other_child = world.child(other, "oc")
    world.activate(root)
    error = _refused(world, a, arguments("reviewer_1"), UnknownSubagentReference.code)
    peers = [root, a1, b, old]  # nearest first: parent, children, siblings
    assert error.details["candidates"] == [p.session_id for p in peers]
    listed = [line for line in error.message.splitlines() if line.startswith("- ")]
    assert listed == [_line(world, p) for p in peers]
    assert "- root_" in listed[0] and " — running (session_id " in listed[0]
    assert error.message.count(old.session_id) == 1
    for stranger in (a, other, other_child):
        assert stranger.session_id not in error.message


def test_a_handle_of_another_tree_does_not_resolve(world: World, fam: Family) -> None:
    other = world.root("other")
    other_child = world.child(other, "oc")
    assert other_child.handle is not None
    error = _refused(world, fam.a, arguments(other_child.handle), UnknownSubagentReference.code)
    assert error.details["candidates"] == [fam.root.session_id, fam.b.session_id]
    assert other_child.session_id not in error.message
    assert other.session_id not in error.message


@pytest.mark.parametrize("word", ["parent", "root", "children", "child", "Parent", "siblings"])
def test_relationship_words_are_not_targets(world: World, fam: Family, word: str) -> None:
    """A model may write its relative's role for a handle: no word names a session, so it
    is told the handles it can use instead of reaching anyone."""
    error = _refused(world, fam.a, arguments(word), UnknownSubagentReference.code)
    assert error.details["candidates"] == [fam.root.session_id, fam.b.session_id]
    assert fam.root.reference in error.message


def test_a_lone_session_has_no_candidates(world: World) -> None:
    root = world.root("root", PEER_RULES)
    error = _refused(world, root, arguments("ghost_1"), UnknownSubagentReference.code)
    assert error.details["candidates"] == []
    assert "no other session" in error.message


def test_a_ghost_is_reachable_by_uuid_only(world: World, fam: Family) -> None:
    world.store.transact(lambda tx: tx.put_session(attrs.evolve(world.fresh(fam.b), live=False)))
    error = _refused(world, fam.a, arguments(fam.b), UnknownSubagentReference.code)
    assert error.details["candidates"] == [fam.root.session_id]
    sent = world.send(fam.a, fam.b.session_id)
    assert world.engine.message(sent.message_id).recipient == fam.b.session_id


def test_legacy_peer_is_addressed_by_uuid(world: World, fam: Family) -> None:
    old = world.child(fam.root, "old", legacy=True)
    assert old.handle is None and old.reference == old.session_id
    sent = world.send(fam.root, old)
    assert world.engine.message(sent.message_id).recipient == old.session_id


# -- 5 self_send -----------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["handle", "uuid", "UUID"])
def test_self_send(world: World, fam: Family, spelling: str) -> None:
    reference = {
        "handle": fam.a.reference,
        "uuid": fam.a.session_id,
        "UUID": fam.a.session_id.upper(),
    }[spelling]
    _refused(world, fam.a, arguments(reference), SelfSend.code)


def test_legacy_self_send_by_uuid(world: World, fam: Family) -> None:
    old = world.child(fam.root, "old", PEER_RULES, legacy=True)
    _refused(world, old, arguments(old.session_id), SelfSend.code)


# -- guard order ------------------------------------------------------------------------------


def test_invalid_arguments_beats_invalid_body(world: World, fam: Family) -> None:
    args = {"to": fam.a.reference, "body": "", "extra": True}
    _refused(world, fam.root, args, InvalidArguments.code)


def test_invalid_body_beats_recipient_resolution(world: World, fam: Family) -> None:
    world.configure(max_body_bytes=3)
    _refused(world, fam.root, arguments(UNKNOWN_UUID, " "), InvalidBody.code)
    _refused(world, fam.root, arguments("nobody", "four"), InvalidBody.code)
    _refused(world, fam.root, arguments(fam.root, ""), InvalidBody.code)


def test_resolution_beats_permission(world: World) -> None:
    root = world.root("mute")  # no rules: every send would be denied
    other = world.root("other")
    _refused(world, root, arguments(UNKNOWN_UUID), UnknownSession.code)
    _refused(world, root, arguments(other.session_id), NotTreePeer.code)
    _refused(world, root, arguments("nobody"), UnknownSubagentReference.code)


def test_self_send_beats_permission(world: World) -> None:
    root = world.root("mute")
    _refused(world, root, arguments(root), SelfSend.code)


def test_permission_beats_hops_inbox_and_inflight(world: World, fam: Family) -> None:
    world.configure(max_hops=1, max_pending_per_session=1, max_inflight_per_pair=1)
    _chain_consume(world, fam.root, fam.a)  # a's run now has base hop 1
    world.send(fam.b, fam.root)  # root's inbox is now full, and the b->root window too
    world.set_rules(fam.a, {"parent": "deny"})
    _refused(world, fam.a, arguments(fam.root), PermissionDenied.code)
    world.set_rules(fam.a, {"parent": "ask"})
    _refused(world, fam.a, arguments(fam.root), ApprovalRequired.code)
    world.set_rules(fam.b, {"parent": "deny"})
    _refused(world, fam.b, arguments(fam.root), PermissionDenied.code)


def test_hops_beat_inbox_and_inbox_beats_inflight(world: World, fam: Family) -> None:
    world.configure(max_hops=1, max_pending_per_session=2, max_inflight_per_pair=2)
    _chain_consume(world, fam.root, fam.a)
    world.send(fam.b, fam.root)
    world.send(fam.b, fam.root)  # inbox of root full, and the b->root window full
    _refused(world, fam.a, arguments(fam.root), MaxHopsExceeded.code)
    _refused(world, fam.b, arguments(fam.root), InboxFull.code)


def test_idempotent_replay_beats_permission_and_guards(world: World, fam: Family) -> None:
    world.configure(max_pending_per_session=1, max_inflight_per_pair=1)
    ctx = world.ctx(fam.a)
    first = world.engine.send_message(ctx, arguments(fam.root, "once"))
    world.set_rules(fam.a, {})
    assert world.engine.send_message(ctx, arguments(fam.root, "once")) == first
    world.set_rules(fam.a, {"parent": "ask"})
    assert world.engine.send_message(ctx, arguments(fam.root, "once")) == first
    world.set_rules(fam.a, PEER_RULES)
    _refused(world, fam.a, arguments(fam.root), InboxFull.code)
    world.configure(max_hops=-1, max_pending_per_session=5)
    _refused(world, fam.a, arguments(fam.root), InflightFull.code)
    world.configure(max_pending_per_session=1, max_hops=0)
    before = world.snapshot(ctx)
    assert world.engine.send_message(ctx, arguments(fam.root, "once")) == first
    assert world.snapshot(ctx) == before
    assert world.pending_agent_mail(fam.root) == 1


def test_replay_after_the_run_ended(world: World, fam: Family) -> None:
    ctx = world.ctx(fam.a)
    first = world.engine.send_message(ctx, arguments(fam.root))
    world.drain(fam.a)  # the sending run finishes
    assert world.engine.send_message(ctx, arguments(fam.root)) == first
    assert world.pending_agent_mail(fam.root) == 1


def test_disabled_beats_replay(world: World, fam: Family) -> None:
    ctx = world.ctx(fam.a)
    world.engine.send_message(ctx, arguments(fam.root))
    world.configure(enabled=False)
    _refused(world, ctx, arguments(fam.root), MessagingDisabled.code)


def test_invalid_arguments_beat_replay(world: World, fam: Family) -> None:
    ctx = world.ctx(fam.a)
    world.engine.send_message(ctx, arguments(fam.root))
    _refused(world, ctx, {"to": fam.root.reference}, InvalidArguments.code)


def test_a_reused_call_id_with_other_arguments_is_a_conflict(world: World, fam: Family) -> None:
    # A second, different send under the same tool call id used to return the
    # first call's message_id as a success and send nothing.
    ctx = world.ctx(fam.a)
    first = world.engine.send_message(ctx, arguments(fam.root))
    for other in (arguments(fam.root, "something else"), arguments(fam.b),
                  arguments(fam.root, mode="queue"), arguments(UNKNOWN_UUID),
                  arguments(fam.a)):
        error = _refused(world, ctx, other, IdempotencyConflict.code)
        assert first.message_id in str(error.details) and "new tool call id" in str(error)
    assert world.pending_agent_mail(fam.root) == 1


def test_an_omitted_mode_is_the_same_call_as_steer(world: World, fam: Family) -> None:
    ctx = world.ctx(fam.a)
    first = world.engine.send_message(ctx, arguments(fam.root))
    assert world.engine.send_message(ctx, arguments(fam.root, mode="steer")) == first


def test_a_retry_after_max_body_bytes_was_lowered_gets_its_message_id(
    world: World, fam: Family
) -> None:
    # The replay comes before every guard that reads today's config.
    ctx = world.ctx(fam.a)
    first = world.engine.send_message(ctx, arguments(fam.root, "a longer body"))
    world.configure(max_body_bytes=4)
    assert world.engine.send_message(ctx, arguments(fam.root, "a longer body")) == first
    _refused(world, fam.a, arguments(fam.root, "a longer body"), InvalidBody.code)


def test_a_retry_after_the_recipient_was_reverted_gets_its_message_id(
    world: World, fam: Family
) -> None:
    # ... and before every guard that reads today's tree: the handle no longer resolves.
    ctx = world.ctx(fam.a)
    first = world.engine.send_message(ctx, arguments(fam.b))
    world.engine.revert(fam.b.session_id)
    assert world.engine.send_message(ctx, arguments(fam.b)) == first
    _refused(world, fam.a, arguments(fam.b), UnknownSubagentReference.code)


# -- 7 permission ----------------------------------------------------------------------------


def test_deny_rule(world: World, fam: Family) -> None:
    world.set_rules(fam.a, {"parent": "allow", "sibling": "deny"})
    error = _refused(world, fam.a, arguments(fam.b), PermissionDenied.code)
    assert error.details == {"label": "sibling"}
    assert world.send(fam.a, fam.root).recipient_state is RecipientState.QUEUED


def test_no_rules_denies_and_hides_the_tool(world: World) -> None:
    root = world.root("root")
    child = world.child(root, "c")
    assert world.engine.tool_visible(root.session_id) is False
    assert world.engine.tool_visible(child.session_id) is False
    _refused(world, root, arguments(child), PermissionDenied.code)
    _refused(world, child, arguments(root), PermissionDenied.code)


def test_grandparent_uses_the_catch_all_label(world: World, fam: Family) -> None:
    grandchild = world.child(fam.a, "g", PEER_RULES)
    error = _refused(world, grandchild, arguments(fam.root), PermissionDenied.code)
    assert error.details == {"label": "*"}
    world.set_rules(grandchild, {"*": "allow"})
    world.send(grandchild, fam.root)


def test_ask_then_session_grant(world: World, fam: Family) -> None:
    world.set_rules(fam.a, {"sibling": "ask", "parent": "ask"})
    error = _refused(world, fam.a, arguments(fam.b), ApprovalRequired.code)
    assert error.details == {"label": "sibling", "operation": "send_message(to,body,mode)"}
    world.engine.grant("session", fam.a.session_id, "sibling")
    world.send(fam.a, fam.b)
    world.send(fam.a, fam.b)
    _refused(world, fam.a, arguments(fam.root), ApprovalRequired.code)
    world.set_rules(fam.b, {"sibling": "ask"})
    _refused(world, fam.b, arguments(fam.a), ApprovalRequired.code)


def test_a_grant_made_under_the_old_argument_shape_is_ignored(world: World,
                                                             fam: Family) -> None:
    """Grants are keyed by the operation's argument schema: one given when the recipient was
    ``recipient_session_id`` does not approve today's ``to`` (it must be approved again)."""
    world.set_rules(fam.a, {"sibling": "ask"})
    old = "send_message(recipient_session_id,body,mode)"
    for scope, subject in ((GrantScope.SESSION, fam.a.session_id),
                           (GrantScope.TREE, fam.root.session_id)):
        name = keys.grant_counter(scope, subject, old, "sibling")

        def grant(tx: WriteTxn, name: str = name) -> int:
            return tx.add(CounterName(name), 1)

        world.store.transact(grant)
        assert _counter(world, name) == 1
    _refused(world, fam.a, arguments(fam.b), ApprovalRequired.code)
    world.engine.grant("tree", fam.root.session_id, "sibling")  # under the current shape
    world.send(fam.a, fam.b)


def test_tree_grant_covers_every_session_of_the_tree(world: World, fam: Family) -> None:
    for session in (fam.a, fam.b):
        world.set_rules(session, {"sibling": "ask"})
    world.engine.grant("tree", fam.root.session_id, "sibling")
    world.send(fam.a, fam.b)
    world.send(fam.b, fam.a)


def test_once_grant_is_spent_by_one_send(world: World, fam: Family) -> None:
    world.set_rules(fam.a, {"parent": "ask"})
    ctx = world.ctx(fam.a)
    _refused(world, ctx, arguments(fam.root), ApprovalRequired.code)
    once = grant_counter(GrantScope.ONCE, f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}",
                         "parent")
    world.engine.grant("once", f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}", "parent")
    world.engine.grant("once", f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}", "parent")
    assert _counter(world, once) == 1
    sent = world.engine.send_message(ctx, arguments(fam.root))
    assert _counter(world, once) == 0
    assert world.engine.send_message(ctx, arguments(fam.root)) == sent  # replay, not a 2nd send
    _refused(world, fam.a, arguments(fam.root), ApprovalRequired.code)
    assert world.pending_agent_mail(fam.root) == 1


def test_once_grant_survives_a_send_refused_later(world: World, fam: Family) -> None:
    world.configure(max_pending_per_session=1)
    world.send(fam.b, fam.root)
    world.set_rules(fam.a, {"parent": "ask"})
    ctx = world.ctx(fam.a)
    subject = f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}"
    world.engine.grant("once", subject, "parent")
    _refused(world, ctx, arguments(fam.root), InboxFull.code)
    assert _counter(world, grant_counter(GrantScope.ONCE, subject, "parent")) == 1


def test_once_grant_covers_only_its_tool_call(world: World, fam: Family) -> None:
    world.set_rules(fam.a, {"parent": "ask"})
    ctx = world.ctx(fam.a)
    world.engine.grant("once", f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}", "parent")
    _refused(world, fam.a, arguments(fam.root), ApprovalRequired.code)


def test_grant_scope_must_be_known(world: World, fam: Family) -> None:
    with pytest.raises(InvalidRequest):
        world.engine.grant("forever", fam.a.session_id, "parent")


# -- 8 max_hops ------------------------------------------------------------------------------


def _chain_consume(world: World, sender: Session, recipient: Session) -> str:
    """``sender`` sends to ``recipient``, whose run then consumes it in a committed request."""
    sent = world.send(sender, recipient)
    run = world.activate(recipient)
    request = world.engine.begin_request(recipient.session_id, run.run_id)
    assert sent.message_id in [d.message_id for d in request.deliveries]
    world.engine.commit_request(recipient.session_id, run.run_id, request.request_id)
    return sent.message_id


def _line_of(world: World, length: int) -> list[Session]:
    sessions = [world.root("s0", PEER_RULES)]
    for n in range(1, length):
        sessions.append(world.child(sessions[-1], f"s{n}", PEER_RULES))
    return sessions


def test_max_hops_boundary(world: World) -> None:
    world.configure(max_hops=2)
    s = _line_of(world, 4)
    first = _chain_consume(world, s[0], s[1])
    second = _chain_consume(world, s[1], s[2])
    assert [world.engine.message(m).hop for m in (first, second)] == [1, 2]
    error = _refused(world, s[2], arguments(s[3]), MaxHopsExceeded.code)
    assert error.details == {"hop": 3, "limit": 2}
    world.send(s[1], s[2])  # s1's run is still at base 1: hop 2 passes


@pytest.mark.parametrize("max_hops", [0, -1, -50])
def test_max_hops_zero_or_negative_disables_the_guard(world: World, max_hops: int) -> None:
    world.configure(max_hops=max_hops)
    s = _line_of(world, 9)
    hops = [world.engine.message(_chain_consume(world, s[n], s[n + 1])).hop for n in range(8)]
    assert hops == [1, 2, 3, 4, 5, 6, 7, 8]


def test_hop_base_counts_consumed_mail_not_claimed(world: World) -> None:
    world.configure(max_hops=1)
    s = _line_of(world, 3)
    world.send(s[0], s[1])
    run = world.activate(s[1])
    request = world.engine.begin_request(s[1].session_id, run.run_id)  # claimed, not consumed
    assert world.engine.message(world.send(s[1], s[2]).message_id).hop == 1
    world.engine.abort_request(s[1].session_id, run.run_id, request.request_id)
    assert world.engine.message(world.send(s[1], s[2]).message_id).hop == 1
    request = world.engine.begin_request(s[1].session_id, run.run_id)
    world.engine.commit_request(s[1].session_id, run.run_id, request.request_id)
    _refused(world, s[1], arguments(s[2]), MaxHopsExceeded.code)


def test_hop_base_is_the_highest_consumed_hop_not_the_last(world: World) -> None:
    s = _line_of(world, 4)
    for n in range(3):
        _chain_consume(world, s[n], s[n + 1])  # s3's run has consumed a hop-3 message
    fresh = world.child(s[2], "fresh", PEER_RULES)  # a run at base 0
    low = _chain_consume(world, fresh, s[3])  # s3's same run then consumes a hop-1 message
    assert world.engine.message(low).hop == 1
    world.configure(max_hops=3)
    error = _refused(world, s[3], arguments(s[2]), MaxHopsExceeded.code)
    assert error.details == {"hop": 4, "limit": 3}


def test_hop_base_is_per_run(world: World) -> None:
    world.configure(max_hops=1)
    s = _line_of(world, 3)
    _chain_consume(world, s[0], s[1])
    _refused(world, s[1], arguments(s[2]), MaxHopsExceeded.code)
    run = world.activate(s[1])
    world.engine.finish_run(s[1].session_id, run.run_id)
    assert world.engine.message(world.send(s[1], s[2]).message_id).hop == 1  # a fresh run


# -- 9 inbox_full ----------------------------------------------------------------------------


def _children(world: World, root: Session, count: int) -> list[Session]:
    return [world.child(root, f"c{n}", PEER_RULES) for n in range(count)]


def test_inbox_full_at_the_cap(world: World) -> None:
    world.configure(max_pending_per_session=3)
    root = world.root("root", PEER_RULES)
    kids = _children(world, root, 4)
    world.send(kids[0], root)
    world.send(kids[1], root)
    world.send(kids[2], root)  # cap - 1 pending: accepted
    error = _refused(world, kids[3], arguments(root), InboxFull.code)
    assert error.details == {"pending": 3, "limit": 3}
    assert world.pending_agent_mail(root) == 3


def test_non_agent_mail_does_not_count(world: World) -> None:
    world.configure(max_pending_per_session=2)
    root = world.root("root", PEER_RULES)
    kids = _children(world, root, 3)
    for owner in (Owner.PLUGIN, Owner.USER, Owner.DELEGATION, Owner.GOAL):
        world.engine.accept(root.session_id, f"{owner} mail", owner)
        world.engine.accept(root.session_id, f"more {owner} mail", owner)
    world.send(kids[0], root)
    world.send(kids[1], root)
    _refused(world, kids[2], arguments(root), InboxFull.code)
    assert len(world.engine.pending(root.session_id)) == 10


def test_accept_refuses_agent_mail(world: World) -> None:
    root = world.root("root")
    before = world.snapshot()
    with pytest.raises(TreemailError):
        world.engine.accept(root.session_id, "sneaky", Owner.AGENT)
    assert world.snapshot() == before


def test_discarding_frees_one_inbox_slot(world: World) -> None:
    world.configure(max_pending_per_session=2)
    root = world.root("root", PEER_RULES)
    kids = _children(world, root, 4)
    first = world.send(kids[0], root)
    world.send(kids[1], root)
    _refused(world, kids[2], arguments(root), InboxFull.code)
    world.engine.discard(first.message_id, "operator cleared it")
    world.send(kids[2], root)
    _refused(world, kids[3], arguments(root), InboxFull.code)


def test_claimed_mail_counts_until_consumed(world: World) -> None:
    world.configure(max_pending_per_session=3)
    root = world.root("root", PEER_RULES)
    kids = _children(world, root, 5)
    run = world.activate(root)
    world.send(kids[0], root)  # steer: joins root's run
    request = world.engine.begin_request(root.session_id, run.run_id)
    world.send(kids[1], root, mode="queue")
    world.send(kids[2], root)
    _refused(world, kids[3], arguments(root), InboxFull.code)
    world.engine.abort_request(root.session_id, run.run_id, request.request_id)
    _refused(world, kids[3], arguments(root), InboxFull.code)  # released counts
    request = world.engine.begin_request(root.session_id, run.run_id)
    agent_mail = [d for d in request.deliveries if d.owner is Owner.AGENT]
    assert len(agent_mail) == 2  # the released one and the steer of kids[2]
    world.engine.commit_request(root.session_id, run.run_id, request.request_id)
    assert world.pending_agent_mail(root) == 1
    world.send(kids[3], root)
    world.send(kids[4], root)
    _refused(world, kids[0], arguments(root), InboxFull.code)


# -- 10 inflight_full ------------------------------------------------------------------------


def test_inflight_window_per_directed_pair(world: World, fam: Family) -> None:
    world.configure(max_inflight_per_pair=2)
    world.send(fam.a, fam.root)
    world.send(fam.a, fam.root)
    error = _refused(world, fam.a, arguments(fam.root), InflightFull.code)
    assert error.details == {"pending": 2, "limit": 2}
    world.send(fam.b, fam.root)  # another pair into the same recipient
    world.send(fam.a, fam.b)  # the same sender to another recipient
    world.send(fam.root, fam.a)  # the opposite direction
    world.send(fam.root, fam.a)
    _refused(world, fam.root, arguments(fam.a), InflightFull.code)


def test_consuming_frees_the_window(world: World, fam: Family) -> None:
    world.configure(max_inflight_per_pair=2)
    run = world.activate(fam.root)
    world.send(fam.a, fam.root)
    request = world.engine.begin_request(fam.root.session_id, run.run_id)
    world.send(fam.a, fam.root)
    _refused(world, fam.a, arguments(fam.root), InflightFull.code)  # claimed counts
    world.engine.commit_request(fam.root.session_id, run.run_id, request.request_id)
    world.send(fam.a, fam.root)
    _refused(world, fam.a, arguments(fam.root), InflightFull.code)


def test_discarding_frees_the_window(world: World, fam: Family) -> None:
    world.configure(max_inflight_per_pair=1)
    first = world.send(fam.a, fam.root)
    _refused(world, fam.a, arguments(fam.root), InflightFull.code)
    world.engine.discard(first.message_id, "stale")
    world.send(fam.a, fam.root)


def test_inflight_zero_disables_the_window(world: World, fam: Family) -> None:
    world.configure(max_inflight_per_pair=0, max_pending_per_session=100)
    for _ in range(12):
        world.send(fam.a, fam.root)
    assert world.pending_agent_mail(fam.root) == 12


def test_default_window_is_four(world: World, fam: Family) -> None:
    for _ in range(4):
        world.send(fam.a, fam.root)
    _refused(world, fam.a, arguments(fam.root), InflightFull.code)


# -- engine_shutdown and tool context ----------------------------------------------------


def test_engine_shutdown(world: World, fam: Family) -> None:
    kept = world.send(fam.a, fam.root)
    world.engine.shutdown()
    _refused(world, fam.a, arguments(fam.root), EngineShutdown.code)
    _refused(world, fam.a, "garbage", EngineShutdown.code)
    assert [m.message_id for m in world.engine.pending(fam.root.session_id)] == [
        kept.message_id
    ]


def test_a_tool_context_must_name_the_senders_live_run(world: World, fam: Family) -> None:
    run = world.activate(fam.a)
    other_run = world.activate(fam.b)
    code = InvalidToolContext.code
    _refused(world, ToolContext(fam.a.session_id, UNKNOWN_UUID, "c1"), arguments(fam.b), code)
    _refused(world, ToolContext(fam.a.session_id, other_run.run_id, "c2"), arguments(fam.b), code)
    world.engine.finish_run(fam.a.session_id, run.run_id)
    _refused(world, ToolContext(fam.a.session_id, run.run_id, "c3"), arguments(fam.b), code)


# -- a run that is no longer running --------------------------------------------------------
# The live-run check is the first step of the permission guard, before the rule is read: a
# late call from an ended run is refused alike under every rule, and under ``ask`` it is
# never held for approval (an approval would later send mail from a dead run).

ENDED_RULES: dict[str, dict[str, str]] = {
    "allow": {"parent": "allow"},
    "ask": {"parent": "ask"},
    "deny": {"parent": "deny"},
    "no rule for the label": {"sibling": "allow"},
    "no rules": {},
}

# How a run ends: each takes the world, the session and the run id.
ENDS: dict[str, Callable[[World, Session, str], object]] = {
    "finished": lambda w, s, r: w.engine.finish_run(s.session_id, r),
    "cancelled": lambda w, s, r: w.engine.cancel_run(s.session_id, r, "the user stopped it"),
    "given up": lambda w, s, r: w.engine.give_up_run(s.session_id, r, "the model kept failing"),
    "crashed": lambda w, s, r: (w.restart(), w.engine.recover()),
}


def _ended(world: World, rules: Mapping[str, str], end: str
           ) -> tuple[Session, Session, ToolContext]:
    """A root, its child, and a tool call of the child's run, which then ended as ``end``
    says."""
    root = world.root("root", PEER_RULES)
    kid = world.child(root, "kid", rules)
    ctx = world.ctx(kid)
    ENDS[end](world, kid, ctx.run_id)
    ended = RunState.FINISHED if end == RunState.FINISHED else RunState.INTERRUPTED
    assert world.engine.run(ctx.run_id).status is ended
    return root, kid, ctx


@pytest.mark.parametrize("end", sorted(ENDS))
@pytest.mark.parametrize("rule", sorted(ENDED_RULES))
def test_a_run_that_ended_cannot_send_under_any_rule(world: World, rule: str, end: str) -> None:
    root, _, ctx = _ended(world, ENDED_RULES[rule], end)
    error = _refused(world, ctx, arguments(root), InvalidToolContext.code)
    assert f"run {ctx.run_id} is not running" in error.message


@pytest.mark.parametrize("end", sorted(ENDS))
@pytest.mark.parametrize("scope", ["once", "session", "tree"])
def test_a_grant_does_not_let_a_run_that_ended_send(world: World, scope: str, end: str) -> None:
    root = world.root("root", PEER_RULES)
    kid = world.child(root, "kid", {"parent": "ask"})
    ctx = world.ctx(kid)
    subject = {"once": f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}",
               "session": kid.session_id, "tree": root.session_id}[scope]
    world.engine.grant(scope, subject, "parent")
    ENDS[end](world, kid, ctx.run_id)
    # _refused compares the call's once-grant too: the refusal does not spend it.
    _refused(world, ctx, arguments(root), InvalidToolContext.code)
    assert _counter(world, grant_counter(GrantScope(scope), subject, "parent")) == 1


def test_an_ended_run_is_refused_at_the_permission_guard(world: World) -> None:
    """Its place in the order: the guards before permission answer first, those after never."""
    root, kid, ctx = _ended(world, {"parent": "ask"}, SessionState.FINISHED)
    _refused(world, ctx, arguments(root, "   "), InvalidBody.code)
    _refused(world, ctx, arguments("nobody_00000000"), UnknownSubagentReference.code)
    _refused(world, ctx, arguments(kid), SelfSend.code)
    world.configure(max_pending_per_session=1, max_inflight_per_pair=1)
    world.send(world.child(root, "sibling", PEER_RULES), root)  # root's inbox is full now
    world.engine.grant("session", kid.session_id, "parent")
    _refused(world, ctx, arguments(root), InvalidToolContext.code)
    _refused(world, world.ctx(kid), arguments(root), InboxFull.code)  # a live run


def _rule_before_run(a: Attempt) -> None:
    """The slip: the permission guard reads the rule before it checks the run is live."""
    sender, run, recipient = a.sender, a.run, a.recipient
    assert sender is not None and run is not None and recipient is not None
    _check_permission(a.tx, current_rules(a.agents, sender), sender, recipient, a.ctx)
    if run.status is not RunState.RUNNING and not a.approved:
        raise InvalidToolContext(f"run {run.run_id} is not running; only a live run can send")


def test_the_ended_run_checks_catch_the_rule_read_before_the_run(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken build with that slip answers an ended run's call by its rule: under ``ask`` it
    would be held for approval. The checks above then fail for ask, deny and no rule."""
    slipped = tuple(attrs.evolve(g, check=_rule_before_run) if g.name == "permission" else g
                    for g in sending.GUARDS)
    monkeypatch.setattr(sending, "GUARDS", slipped)
    codes = {}
    for rule, rules in ENDED_RULES.items():
        root, _, ctx = _ended(world, rules, SessionState.FINISHED)
        with pytest.raises(TreemailError) as caught:
            world.engine.send_message(ctx, arguments(root))
        codes[rule] = caught.value.code
    assert codes == {"allow": InvalidToolContext.code,
                     "ask": ApprovalRequired.code, "deny": PermissionDenied.code,
                     "no rule for the label": PermissionDenied.code,
                     "no rules": PermissionDenied.code}


def test_default_body_limit_is_32768_bytes(world: World, fam: Family) -> None:
    fits = "€" * 10922 + "ab"  # 32766 + 2 bytes
    assert len(fits.encode()) == 32768
    _refused(world, fam.root, arguments(fam.a, fits + "c"), InvalidBody.code)
    world.send(fam.root, fam.a, fits)


def test_inbox_full_names_the_limit_not_the_count_as_the_limit(world: World, fam: Family) -> None:
    world.configure(max_pending_per_session=2)
    world.engine.send_message(world.ctx(fam.a), arguments(fam.root))
    world.engine.send_message(world.ctx(fam.a), arguments(fam.root))
    error = _refused(world, fam.b, arguments(fam.root), InboxFull.code)
    assert "its limit" not in str(error)
    assert "at most 2 (max_pending_per_session)" in str(error)


@pytest.mark.parametrize("call_id", ["😀" * 130, "é" * 129, "x" * 257])
def test_a_call_id_is_bounded_in_bytes_not_characters(
    world: World, fam: Family, call_id: str
) -> None:
    # 130 emoji are 130 characters but 520 bytes: counted in characters they passed the
    # bound and then overflowed LMDB's 511-byte key as a bare store:failure.
    ctx = ToolContext(fam.a.session_id, world.activate(fam.a).run_id, call_id)
    before = world.snapshot()  # the call's own counters cannot be keyed by this id
    with pytest.raises(TreemailError) as caught:
        world.engine.send_message(ctx, arguments(fam.b))
    assert caught.value.code == InvalidToolContext.code, str(caught.value)
    assert "256 bytes" in str(caught.value)
    assert world.snapshot() == before


def test_a_call_id_of_256_bytes_is_accepted(world: World, fam: Family) -> None:
    ctx = ToolContext(fam.a.session_id, world.activate(fam.a).run_id, "é" * 128)
    world.engine.send_message(ctx, arguments(fam.b))


@pytest.mark.parametrize("body", ["plain", "naïve 日本 \U0001f600", "lone \ud800 surrogate",
                                  'quote " backslash \\ tab \t nl \n'])
def test_the_arguments_digest_is_the_one_earlier_versions_stored(body: str) -> None:
    """Stored results carry the digest of their call: sha256 of json.dumps([to, body,
    mode]), the same bytes whatever builds it, or a retry of an old call would conflict."""
    args = SendArguments(to="peer_1", body=body, mode=Mode.QUEUE)
    expected = hashlib.sha256(json.dumps([args.to, body, "queue"]).encode()).hexdigest()
    assert arguments_digest(args) == expected
