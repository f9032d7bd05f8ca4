"""A run's budget of model requests and tool calls: a model in a loop is stopped, the run
interrupted with a reason naming the budget, and the session left idle until new input."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from tests.unit.conftest import agent
from treemail.adapters.runtime.budget import Budget
from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ScriptedModel, ToolCall
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.core import events
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import SessionState
from treemail.core.records import Session
from treemail.core.store import Store


def looping(calls: int = 1, stop_after: int | None = None) -> ScriptedModel:
    """A model that answers every request with ``calls`` calls of a tool it does not have
    (each result is a tool error, which it ignores), for ever, or until ``stop_after``
    requests, then ends its turn."""

    def reply(messages: Sequence[ChatMessage]) -> ModelReply:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if stop_after is not None and turn >= stop_after:
            return ModelReply(text="done at last")
        return ModelReply(tool_calls=tuple(ToolCall(f"call-{turn}-{i}", "spin", {})
                                           for i in range(calls)))

    return ScriptedModel(reply)


def _ran(store: Store, model: ScriptedModel, budget: Budget | None) -> tuple[Runtime, Session]:
    async def go() -> tuple[Runtime, Session]:
        rt = Runtime(store, CountingIds(), {"root": Agent(agent("root"), model)},
                     budget=budget)
        await rt.start()
        root = await rt.create_root("root")
        await rt.accept(root.session_id, "go")
        await rt.quiesce(timeout=60)
        await rt.shutdown()
        return rt, root

    async def bounded() -> tuple[Runtime, Session]:
        async with asyncio.timeout(90):
            return await go()

    return asyncio.run(bounded())


def _ends(rt: Runtime, session: Session) -> list[tuple[str, Any]]:
    return [(e.kind, e.data.get("reason")) for e in rt.engine.events(session.session_id)
            if e.kind in (EventKind.RUN_INTERRUPTED, EventKind.RUN_FINISHED)]


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_a_looping_model_is_stopped_by_the_default_request_budget(store: Store) -> None:
    model = looping()
    rt, root = _ran(store, model, None)  # the default budget: on, 200 requests
    assert len(model.requests) == 200
    [(kind, reason)] = _ends(rt, root)
    assert kind == EventKind.RUN_INTERRUPTED
    assert reason.startswith("run budget exhausted: the run made 200 model requests")
    assert "[runs] max_model_requests" in reason
    assert rt.engine.session(root.session_id).state is SessionState.IDLE
    assert rt.incidents == []  # a spent budget is an outcome, not a failure of treemail


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_the_tool_call_budget_stops_a_run_in_the_middle_of_a_reply(store: Store) -> None:
    model = looping(calls=2)
    rt, root = _ran(store, model, Budget(max_model_requests=0, max_tool_calls=5))
    assert len(model.requests) == 3  # 2 + 2 + 1 calls run; the 6th ends the run
    [(kind, reason)] = _ends(rt, root)
    assert kind == EventKind.RUN_INTERRUPTED and "5 tool calls" in reason
    assert "[runs] max_tool_calls" in reason
    recorded = [len(p.results) for _, p in events.typed(rt.engine.events(root.session_id))
                if isinstance(p, events.ToolResults)]
    assert recorded == [2, 2, 1]


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_zero_disables_a_budget(store: Store) -> None:
    model = looping(stop_after=230)
    rt, root = _ran(store, model, Budget(max_model_requests=0, max_tool_calls=0))
    assert len(model.requests) == 231
    assert _ends(rt, root) == [(EventKind.RUN_FINISHED, "completed")]


def test_a_budget_is_never_negative() -> None:
    with pytest.raises(ValueError, match="max_tool_calls"):
        Budget(max_tool_calls=-1)
