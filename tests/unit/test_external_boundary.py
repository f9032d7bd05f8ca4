"""The external boundary (spec/external.md) in the engine and in the reference model, side by
side: check_mail claims, the next call consumes, a dropped connection releases. Any mix of
hosted mail, checks, calls and drops leaves both with the same message states, every
accepted message is consumed at most once and, pending, never lost."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from treemail.core import external
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import TreemailError
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import AgentSpec, Mode, Owner, ToolContext
from treemail.models.reference import Reference

from .conftest import agent

OPEN: AgentSpec = agent("peer", {"*": "allow"})

ACTIONS = st.lists(st.sampled_from(
    ["mail_steer", "mail_queue", "check", "call", "drop", "send"]), max_size=25)


class Pair:
    """The engine and the model, driven alike; ``claim`` is the client connection's."""

    def __init__(self) -> None:
        self.engine = Engine(MemoryStore(), CountingIds())
        self.model = Reference(MessagingConfig(), CountingIds())
        self.root = self.engine.create_root(OPEN).session_id
        assert self.model.create_root(OPEN) == self.root
        child, _ = self.engine.attach(self.root, OPEN, "s" * 43)
        self.ext = child.session_id
        assert self.model.attach(self.root, OPEN) == self.ext
        self.claim: tuple[str, str] | None = None
        self.calls = 0

    def tx(self, work: Any) -> Any:
        return self.engine.store.transact(work)

    def mail(self, mode: Mode) -> None:
        sent = self.engine.accept(self.ext, "hello", Owner.USER, mode=mode)
        assert self.model.accept(self.ext, "hello", Owner.USER, mode=mode) == sent

    def settle(self, committed: bool) -> None:
        if self.claim is None:
            return
        run_id, request_id = self.claim
        self.claim = None
        done = self.tx(lambda tx: external.settle(tx, self.ext, run_id, request_id, committed))
        assert self.model.external_settle(self.ext, run_id, request_id, committed) == done

    def check(self) -> list[str]:
        self.settle(True)
        request = self.tx(lambda tx: external.check_mail(tx, self.engine.ids, self.ext))
        modelled = self.model.external_check(self.ext)
        if request is None:
            assert modelled is None
            return []
        assert modelled is not None and modelled[0] == request.request_id
        assert [d.message_id for d in request.deliveries] == [m for m, _, _ in modelled[2]]
        self.claim = (request.run_id, request.request_id)
        return [d.message_id for d in request.deliveries]

    def send(self) -> None:
        self.settle(True)
        run_id = self.tx(lambda tx: external.turn_run(tx, self.engine.ids, self.ext))
        assert self.model.external_turn_run(self.ext) == run_id
        self.calls += 1
        ctx = ToolContext(self.ext, run_id, f"call-{self.calls}")
        args = {"to": self.root, "body": "hi", "mode": "queue"}
        try:
            sent = self.engine.send_message(ctx, args)
        except TreemailError as refused:  # the per-pair cap, once the root reads nothing
            with pytest.raises(type(refused)):
                self.model.send_message(ctx, args)
        else:
            assert self.model.send_message(ctx, args) == sent

    def states(self) -> tuple[dict[str, str], dict[str, str]]:
        engine = {m.message_id: str(m.state) for m in self.engine.pending(self.ext)}
        model = {m.message_id: str(m.state) for m in self.model.world.pending_of(self.ext)}
        return engine, model


@given(ACTIONS)
def test_engine_and_model_agree_on_the_external_boundary(actions: list[str]) -> None:
    pair = Pair()
    for action in actions:
        if action.startswith("mail"):
            pair.mail(Mode.STEER if action == "mail_steer" else Mode.QUEUE)
        elif action == "check":
            pair.check()
        elif action == "call":
            pair.settle(True)
        elif action == "drop":
            pair.settle(False)
        else:
            pair.send()
        engine, model = pair.states()
        assert engine == model
    log = pair.engine.events(pair.ext)
    accepted = [e.data["message_id"] for e in log
                if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED]
    consumed = [e.data["message_id"] for e in log
                if e.kind == EventKind.PRODUCER_MESSAGE_CONSUMED]
    assert len(consumed) == len(set(consumed))  # never consumed twice
    pending = {m.message_id for m in pair.engine.pending(pair.ext)}
    assert set(accepted) == set(consumed) | pending  # and nothing lost


def test_mail_claimed_by_a_dropped_call_comes_again_then_is_consumed_once() -> None:
    pair = Pair()
    pair.mail(Mode.QUEUE)
    first = pair.check()
    pair.settle(False)  # the connection ended before its next call
    assert [pair.engine.message(m).state for m in first] == [MessageState.RELEASED]
    assert pair.check() == first  # delivered again
    assert pair.check() == []  # this call consumed it
    assert [pair.engine.message(m).state for m in first] == [MessageState.CONSUMED]
    assert pair.check() == []  # never a third time


def test_an_external_call_retried_in_another_run_is_answered_not_sent_again() -> None:
    """A restart interrupts the turn's run between a send and its retry: the retry comes in
    a new run, and finds the first result under the session's replay slot."""
    pair = Pair()
    args = {"to": pair.root, "body": "once", "mode": "queue"}

    def call() -> str:
        run_id = pair.tx(lambda tx: external.turn_run(tx, pair.engine.ids, pair.ext))
        ctx = ToolContext(pair.ext, run_id, "mcp-call-1", replay_slot=external.CALL_SLOT)
        return pair.engine.send_message(ctx, args).message_id

    first = call()
    first_run = pair.engine.session(pair.ext).run_id
    pair.engine = Engine(pair.engine.store, pair.engine.ids)  # the daemon restarted...
    assert pair.engine.recover() == 1  # ...and interrupted the turn's run
    assert call() == first
    assert pair.engine.session(pair.ext).run_id != first_run  # the retry came in a new run
    sent = [m for m in pair.engine.pending(pair.root) if m.sender == pair.ext]
    assert [m.message_id for m in sent] == [first]
    # Under the run's own slot (a hosted agent's call) the same retry would be a new send.
    run_id = pair.engine.session(pair.ext).run_id
    assert run_id is not None
    again = pair.engine.send_message(ToolContext(pair.ext, run_id, "mcp-call-1"), args)
    assert again.message_id != first
