"""The actor's failure paths: the model-failure policy, and errors that must not kill it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import pytest

from tests.unit.conftest import agent
from treemail.adapters.runtime.failures import FailurePolicy
from treemail.adapters.runtime.llm import ChatMessage, ModelError, ModelReply, ToolCall
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import SessionState
from treemail.core.records import Owner, Session
from treemail.core.store import Store


def run(main: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(30):
            await main

    asyncio.run(bounded())


class Flaky:
    """Fails (``error``) while ``failing`` is set, else answers ``ok``; counts its calls."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.failing = True
        self.calls = 0

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        self.calls += 1
        if self.failing:
            raise self.error
        return ModelReply(text="ok")


class Naps:
    """An injected sleep: records each back-off, waits for none."""

    def __init__(self) -> None:
        self.taken: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.taken.append(seconds)


def runtime(store: Store, model: Flaky, naps: Naps, limit: int = 3) -> Runtime:
    agents = {name: Agent(agent(name), model) for name in ("root", "kid")}
    policy = FailurePolicy(limit=limit, base=1.0, cap=3.0, sleep=naps)
    return Runtime(store, CountingIds(), agents, failure_policy=policy)


def interrupts(rt: Runtime, session: Session) -> list[str]:
    return [str(e.data["reason"]) for e in rt.engine.events(session.session_id)
            if e.kind == EventKind.RUN_INTERRUPTED]


def test_the_policy_backs_off_doubling_up_to_its_cap_and_gives_up_at_its_limit() -> None:
    policy = FailurePolicy(limit=3, base=0.5, cap=3.0)
    assert [policy.delay(n) for n in range(5)] == [0.0, 1.0, 2.0, 3.0, 3.0]
    assert [policy.exhausted(n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    assert "3 times" in policy.reason(3, ModelError("down", status=None))
    assert policy.reason(1, ModelError("down", status=None)) == "model error: model:error: down"
    with pytest.raises(ValueError, match="limit must be >= 1"):
        FailurePolicy(limit=0)


def test_a_model_that_always_fails_is_tried_limit_times_then_the_session_waits_for_input(
    store: Store,
) -> None:
    model, naps = Flaky(ModelError("down")), Naps()

    async def main() -> None:
        rt = runtime(store, model, naps)
        await rt.start()
        root = await rt.create_root("root")
        await rt.accept(root.session_id, "hello")
        await rt.quiesce(timeout=10)
        assert model.calls == 3
        assert naps.taken == [2.0, 3.0]  # before the 2nd and 3rd tries, none before the 1st
        assert rt.engine.session(root.session_id).state == SessionState.IDLE
        reasons = interrupts(rt, root)
        assert reasons[:2] == ["model error: model:error: down"] * 2
        assert "failed 3 times" in reasons[2] and "new input" in reasons[2]
        # The mail is kept, not lost: it waits with the session.
        assert [m.body for m in rt.engine.pending(root.session_id)] == ["hello"]
        # New input wakes it again, with the full count; a healed model reads both messages.
        model.failing = False
        await rt.accept(root.session_id, "again")
        await rt.quiesce(timeout=10)
        assert model.calls == 4
        assert rt.engine.session(root.session_id).state == SessionState.FINISHED
        assert rt.engine.pending(root.session_id) == []
        assert rt.crashes == [] and len(rt.incidents) == 1
        await rt.shutdown()

    run(main())


def test_a_delegated_session_that_gives_up_tells_its_parent_why(store: Store) -> None:
    model, naps = Flaky(ModelError("down")), Naps()

    async def main() -> None:
        rt = runtime(store, model, naps, limit=1)
        await rt.start()
        root = await rt.create_root("root")
        kid: Session = await rt.writer(rt.engine.delegate, root.session_id,
                                       rt.agent("kid").spec, "work")
        rt.poke(kid.session_id)
        await rt.quiesce(timeout=10)
        notices = [e.data["body"] for e in rt.engine.events(root.session_id)
                   if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                   and e.data.get("owner") == Owner.DELEGATION.value]
        assert len(notices) == 1 and "failed 1 times" in str(notices[0])
        assert rt.engine.session(kid.session_id).state == SessionState.IDLE
        await rt.shutdown()

    run(main())


def test_an_unexpected_error_interrupts_the_run_and_the_actor_lives_on(store: Store) -> None:
    model, naps = Flaky(RuntimeError("bug in \ud800 the adapter")), Naps()

    async def main() -> None:
        rt = runtime(store, model, naps)
        await rt.start()
        root = await rt.create_root("root")
        await rt.accept(root.session_id, "hello")
        await rt.quiesce(timeout=10)
        assert model.calls == 1  # a bug is not retried: it would fail the same way
        assert rt.crashes == []
        [incident] = rt.incidents
        assert isinstance(incident.error, RuntimeError)
        assert rt.engine.session(root.session_id).state == SessionState.IDLE
        [reason] = interrupts(rt, root)
        assert reason.startswith("actor error: RuntimeError: bug in ? the adapter")
        # Still deliverable: new mail wakes the same session.
        model.failing = False
        await rt.accept(root.session_id, "again")
        await rt.quiesce(timeout=10)
        assert rt.engine.session(root.session_id).state == SessionState.FINISHED
        await rt.shutdown()

    run(main())


# -- bad model replies ----------------------------------------------------------------------


class Once:
    """Answers ``first``, then a plain text that ends the run."""

    def __init__(self, first: ModelReply) -> None:
        self.first: ModelReply | None = first
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        self.seen.append([dict(m) for m in messages])
        reply, self.first = self.first or ModelReply(text="done"), None
        return reply


def tree_runtime(store: Store, model: Once) -> Runtime:
    agents = {
        "root": Agent(agent("root", {"child": "allow"}), model),
        "kid": Agent(agent("kid"), Once(ModelReply(text="kid done"))),
    }
    return Runtime(store, CountingIds(), agents)


def accepted(rt: Runtime, session: Session) -> list[str]:
    return [str(e.data["body"]) for e in rt.engine.events(session.session_id)
            if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED]


def bad_reply_outcome(store: Store, make: Any) -> tuple[Runtime, Session, Session, Once]:
    """Run root once on ``make(kid)``'s reply; kid is a delegated child."""
    holder: list[Any] = []

    async def main() -> None:
        model = Once(ModelReply(text="placeholder"))
        rt = tree_runtime(store, model)
        await rt.start()
        root = await rt.create_root("root")
        kid: Session = await rt.writer(rt.engine.delegate, root.session_id,
                                       rt.agent("kid").spec, "work")
        rt.poke(kid.session_id)
        model.first = make(kid)
        await rt.accept(root.session_id, "go")
        await rt.quiesce(timeout=10)
        holder.extend([rt, root, kid, model])
        await rt.shutdown()

    run(main())
    rt, root, kid, model = holder
    return rt, root, kid, model


@pytest.mark.parametrize("call_id", ["x" * 300, "call\nnewline", "call\x07bell",
                                     "\U0001f600" * 130, "id\ud800"])
def test_a_tool_call_id_no_store_can_key_is_digested_and_the_send_goes_through(
    store: Store, call_id: str,
) -> None:
    def make(kid: Session) -> ModelReply:
        return ModelReply(tool_calls=(ToolCall(call_id, "send_message",
                                               {"to": kid.reference, "body": "hi"}),))

    rt, root, kid, model = bad_reply_outcome(store, make)
    assert rt.incidents == [] and rt.crashes == []
    assert accepted(rt, kid)[-1] == "hi"
    [result] = [m for m in model.seen[-1] if m["role"] == "tool"]
    assert result["tool_call_id"].startswith("call_") and "message_id" in result["content"]
    assert rt.engine.session(root.session_id).state == SessionState.FINISHED


def test_a_lone_surrogate_in_reply_text_is_replaced_not_fatal(store: Store) -> None:
    rt, root, _, _ = bad_reply_outcome(store, lambda kid: ModelReply(text="a\ud800b"))
    assert rt.incidents == []
    assert rt.engine.session(root.session_id).state == SessionState.FINISHED
    texts = [e.data["text"] for e in rt.engine.events(root.session_id)
             if e.kind == EventKind.MODEL_OUTPUT]
    assert texts[0] == "a\ufffdb"


def test_a_lone_surrogate_in_a_delegation_task_or_a_body_is_replaced(store: Store) -> None:
    def make(kid: Session) -> ModelReply:
        return ModelReply(tool_calls=(
            ToolCall("c1", "delegate_subagent", {"agent": "kid", "task": "t\ud800"}),
            ToolCall("c2", "send_message", {"to": kid.reference, "body": "b\udfff"}),
        ))

    rt, _, kid, model = bad_reply_outcome(store, make)
    assert rt.incidents == []
    assert accepted(rt, kid)[-1] == "b\ufffd"
    results = [m["content"] for m in model.seen[-1] if m["role"] == "tool"]
    assert all('"error"' not in r for r in results), results


def test_an_unexpected_tool_error_is_a_typed_tool_result(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    def make(kid: Session) -> ModelReply:
        return ModelReply(tool_calls=(ToolCall("c1", "delegate_subagent",
                                               {"agent": "kid", "task": "t"}),))

    monkeypatch.setattr("treemail.adapters.runtime.toolbox.ToolBox._delegate", boom, raising=True)
    rt, root, _, model = bad_reply_outcome(store, make)
    [result] = [m["content"] for m in model.seen[-1] if m["role"] == "tool"]
    assert '"tool:failed"' in result
    assert rt.crashes == [] and len(rt.incidents) == 1
    assert rt.engine.session(root.session_id).state == SessionState.FINISHED


def test_cancel_after_a_run_ended_cancels_the_run_in_flight_now(store: Store) -> None:
    async def main() -> None:
        rt = tree_runtime(store, Once(ModelReply(text="done")))
        root = await rt.create_root("root")
        kid: Session = await rt.writer(rt.engine.delegate, root.session_id,
                                       rt.agent("kid").spec, "work")
        looked_up = rt.engine.session(kid.session_id)  # a queued run
        assert looked_up.run_id is not None
        rt.engine.cancel_run(kid.session_id, looked_up.run_id, "ended meanwhile")
        parent = rt.engine.session(root.session_id)
        # The lookup and the cancel are one writer job: it finds the run queued after the
        # ended one (the task is still unread) and cancels that one.
        answer, stopped = await rt.writer(rt.tools._cancel, parent, kid.reference)
        assert answer == {"cancelled": True} and stopped == (kid.session_id,)
        await rt.shutdown()

    run(main())
