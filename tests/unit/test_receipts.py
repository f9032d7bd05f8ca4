"""Receipts, recall and expiry on the engine: a sender's view of its own mail, its cancel
before any request claimed it, and opt-in expiry that never counts claimed time. Each
refusal is typed and leaves the store as it was; with expiry off no clock is read and no
message carries one."""

from __future__ import annotations

import attrs
import pytest

from treemail.adapters.runtime.toolbox import ToolBox
from treemail.core import events
from treemail.core.agents import parse_agent_doc
from treemail.core.clock import ManualClock
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import (
    AgentDocError,
    ApprovalRequired,
    CancelTooLate,
    TreemailError,
    UnknownSentMessage,
)
from treemail.core.ids import CountingIds
from treemail.core.keys import Table
from treemail.core.lifecycle import MessageState
from treemail.core.memory_store import MemoryStore
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner, Session, ToolContext

OPEN = AgentSpec("open", "talks to anyone", Rules.of({"*": "allow"}))


class Tree:
    """A running root and a delegated kid on a fresh engine; the root sends to the kid."""

    def __init__(self, config: MessagingConfig | None = None,
                 clock: ManualClock | None = None) -> None:
        self.store = MemoryStore()
        self.engine = Engine(self.store, CountingIds(), config, clock=clock)
        self.root = self.engine.create_root(OPEN)
        self.engine.accept(self.root.session_id, "go", Owner.USER)
        self.run = self.engine.start_run(self.root.session_id).run_id
        self.kid = self.engine.delegate(self.root.session_id, OPEN, "task")
        self.calls = 0

    def send(self, body: str = "hi") -> str:
        self.calls += 1
        ctx = ToolContext(self.root.session_id, self.run, f"c{self.calls}")
        return self.engine.send_message(ctx, {"to": self.kid.session_id, "body": body,
                                              "mode": "queue"}).message_id

    def kid_claims(self) -> tuple[str, str]:
        """The kid's run starts and its request claims everything; (run, request)."""
        sid = self.kid.session_id
        run_id = self.engine.start_run(sid).run_id
        return run_id, self.engine.begin_request(sid, run_id).request_id

    def status(self, message_id: str) -> tuple[str, str | None]:
        receipt = self.engine.message_status(self.root.session_id, message_id)
        return receipt.state.value, receipt.reason


def _refused(tree: Tree, code: str, call: object) -> None:
    """``call`` is refused with ``code`` and the store is exactly as it was."""
    before = {table: dict(tree.store.rows(table)) for table in Table}
    with pytest.raises(TreemailError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == code
    assert {table: dict(tree.store.rows(table)) for table in Table} == before


def test_a_receipt_follows_the_mail_until_it_is_consumed() -> None:
    tree = Tree()
    message_id = tree.send()
    assert tree.status(message_id) == (MessageState.ACCEPTED, None)  # the kid's run is queued
    run_id, request_id = tree.kid_claims()
    assert tree.status(message_id) == (MessageState.CLAIMED, None)
    tree.engine.commit_request(tree.kid.session_id, run_id, request_id, events.Reply(text="ok"))
    receipt = tree.engine.message_status(tree.root.session_id, message_id)
    assert (receipt.state, receipt.final, receipt.recipient) == (
        MessageState.CONSUMED, True, tree.kid.session_id)


@pytest.mark.parametrize("asker", ["kid", "root"])
def test_only_the_sender_has_a_receipt_and_nothing_else_is_told(asker: str) -> None:
    tree = Tree()
    message_id = tree.send()
    # The kid did not send it; the root never sent the kid's task (delegation mail) nor an
    # id that names nothing: one answer for all, so no one learns what exists.
    session = tree.kid if asker == "kid" else tree.root
    task = tree.engine.pending(tree.kid.session_id)[0].message_id
    for target in ([message_id] if asker == "kid" else [task, "no-such-id", "\x00"]):
        _refused(tree, UnknownSentMessage.code,
                 lambda: tree.engine.message_status(session.session_id, target))  # noqa: B023
        _refused(tree, UnknownSentMessage.code,
                 lambda: tree.engine.cancel_message(session.session_id, target))  # noqa: B023


def test_a_cancel_frees_the_pair_window_and_the_recipient_never_sees_the_mail() -> None:
    tree = Tree(MessagingConfig(max_inflight_per_pair=1))
    first = tree.send("first")
    with pytest.raises(TreemailError, match="inflight_full"):
        tree.send("second")
    receipt = tree.engine.cancel_message(tree.root.session_id, first)
    assert (receipt.state, receipt.reason) == (MessageState.DISCARDED, "cancelled by sender")
    again = tree.send("second")  # the window is free again
    sid = tree.kid.session_id
    request = tree.engine.begin_request(sid, tree.engine.start_run(sid).run_id)
    assert first not in {d.message_id for d in request.deliveries}
    assert again in {d.message_id for d in request.deliveries}
    discards = [p for _, p in events.typed(tree.engine.events(sid))
                if isinstance(p, events.ProducerMessageDiscarded)]
    assert [(d.message_id, d.reason) for d in discards] == [(first, "cancelled by sender")]


def test_claimed_mail_is_too_late_to_cancel_and_stays_claimed() -> None:
    tree = Tree()
    message_id = tree.send()
    tree.kid_claims()
    _refused(tree, CancelTooLate.code,
             lambda: tree.engine.cancel_message(tree.root.session_id, message_id))
    assert tree.status(message_id) == (MessageState.CLAIMED, None)


class NoClock:
    def now(self) -> float:
        raise AssertionError("the clock was read with expiry off")


def test_with_expiry_off_no_clock_is_read_and_no_mail_carries_one() -> None:
    tree = Tree(clock=NoClock())  # type: ignore[arg-type]
    message_id = tree.send()
    tree.kid_claims()
    tree.engine.recover()
    assert tree.engine.expire_mail(tree.kid.session_id) == []
    assert tree.engine.message(message_id).aged is None


def test_unclaimed_mail_expires_at_reconcile_and_recovery_claimed_mail_never() -> None:
    clock = ManualClock(100)
    tree = Tree(MessagingConfig(message_ttl_seconds=10), clock)
    stale, held = tree.send("stale"), tree.send("held")
    clock.advance(9)
    tree.engine.reconcile(tree.kid.session_id)
    assert tree.status(stale) == (MessageState.ADMITTED, None)  # 9 s < 10 s: kept
    run_id, request_id = tree.kid_claims()  # claims both
    clock.advance(1000)  # a long request: claimed time never counts
    assert tree.engine.expire_mail(tree.kid.session_id) == []
    tree.engine.abort_request(tree.kid.session_id, run_id, request_id)
    assert tree.engine.expire_mail(tree.kid.session_id) == []  # 9 s unclaimed so far
    clock.advance(1)
    tree.engine.cancel_run(tree.kid.session_id, run_id)
    tree.engine.recover()  # as at restart: the check runs before each reconcile
    assert tree.status(stale) == (MessageState.DISCARDED, "expired")
    assert tree.status(held) == (MessageState.DISCARDED, "expired")


def test_an_approved_send_ages_from_its_approval_not_from_a_later_check() -> None:
    """A held send is accepted when the user approves it: its clock starts then, as any
    send's does, and not at the first expiry check that happens to see it."""
    clock = ManualClock(100)
    asks = AgentSpec("asks", "asks before writing to its kid", Rules.of({"child": "ask"}))
    engine = Engine(MemoryStore(), CountingIds(), MessagingConfig(message_ttl_seconds=10),
                    clock=clock)
    root = engine.create_root(asks)
    engine.accept(root.session_id, "go", Owner.USER)
    run_id = engine.start_run(root.session_id).run_id
    kid = engine.delegate(root.session_id, OPEN, "task")
    ctx = ToolContext(root.session_id, run_id, "c1")
    call = {"to": kid.session_id, "body": "hi", "mode": "queue"}
    with pytest.raises(ApprovalRequired):
        engine.send_message(ctx, call)
    held = engine.hold_for_approval(ctx, "send_message", call, "child")  # as the runtime does
    clock.advance(5)
    engine.answer_approval(held.approval_id, True)  # accepted at 105
    [sent] = [m for m in engine.pending(kid.session_id) if m.owner is Owner.AGENT]
    clock.advance(6)
    assert engine.expire_mail(kid.session_id) == []  # 6 s unclaimed: kept
    clock.advance(4)
    assert engine.expire_mail(kid.session_id) == [sent.message_id]  # 10 s since approval


def test_the_agent_doc_opts_its_sessions_into_the_receipt_tools() -> None:
    doc = parse_agent_doc("---\nname: w\nreceipts: true\n---\nwork\n", "w.md")
    assert doc.spec.receipts
    assert not parse_agent_doc("---\nname: w\n---\nwork\n", "w.md").spec.receipts
    with pytest.raises(AgentDocError, match="receipts must be true or false"):
        parse_agent_doc("---\nname: w\nreceipts: yes please\n---\n", "w.md")
    engine = Engine(MemoryStore(), CountingIds())
    with_receipts = attrs.evolve(OPEN, receipts=True)
    box = ToolBox(engine, call=None, agents={"open": with_receipts})  # type: ignore[arg-type]
    session: Session = engine.create_root(OPEN)
    assert box.visible(session)[-2:] == ["message_status", "cancel_message"]
    plain = ToolBox(engine, call=None, agents={"open": OPEN})  # type: ignore[arg-type]
    assert "message_status" not in plain.visible(session)
    plain.external = {session.session_id}  # an MCP client's session: always offered
    assert plain.visible(session)[-2:] == ["message_status", "cancel_message"]

