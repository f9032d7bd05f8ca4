"""An ``ask`` rule routes send_message through the approval flow: the run waits for the user's
answer, an approval sends once, a denial is the generic permission error; pending approvals
outlive the process."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.acceptance.conftest import (
    Brain,
    Messages,
    accepted_bodies,
    agent,
    delegate,
    open_store,
    reply,
    results,
    run,
    runtime,
    send,
    turns,
    two_lives,
    until,
)
from treemail.adapters.runtime.llm import ModelReply
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import PermissionDenied
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState
from treemail.core.records import Approval, ApprovalState, Session

ASKS = {"sibling": "ask"}


def _tree(x: Brain, y: Brain) -> dict[str, Agent]:
    return {"r": agent("r", {"child": "allow"}, Brain(lambda m: ModelReply(text="ok"))),
            "x": agent("x", ASKS, x), "y": agent("y", {"parent": "allow"}, y)}


async def _siblings(rt: Runtime) -> tuple[Session, Session]:
    root = await rt.create_root("r")
    y = await delegate(rt, root, "y", "wait for mail")
    x = await delegate(rt, root, "x", "greet your sibling", start=False)
    return x, y


async def _one_pending(rt: Runtime) -> Approval:
    found: list[Approval] = []

    async def poll() -> None:
        while not found:
            found.extend(await rt.pending_approvals())
            await asyncio.sleep(0.005)

    await poll()
    [approval] = found
    return approval


def test_ask_waits_for_the_user_approve_once_sends_and_deny_is_permission_denied(
    tmp_path: Path,
) -> None:
    ids: dict[str, str] = {}

    def greeter(messages: Messages) -> ModelReply:
        bodies = ["hello", "again"]
        n = turns(messages)
        return reply(send(ids["y"], bodies[n])) if n < 2 else ModelReply(text="done")

    x, y = Brain(greeter), Brain(lambda m: ModelReply(text="ok"))

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, _tree(x, y))
        await rt.start()
        sx, sy = await _siblings(rt)
        ids["y"] = sy.session_id
        rt.poke(sx.session_id)

        first = await _one_pending(rt)
        assert (first.session_id, first.label, first.tool) == (sx.session_id, "sibling",
                                                               "send_message")
        assert accepted_bodies(rt) == []  # nothing is sent while the call waits
        # The run waits with it.
        assert rt.engine.session(sx.session_id).state == SessionState.RUNNING
        approved = await rt.answer(first.approval_id, approve=True, scope="once")
        assert approved.outcome is not None
        assert approved.state is ApprovalState.APPROVED

        second = await _one_pending(rt)  # a once-grant covers one call: asked again
        assert second.approval_id != first.approval_id
        denied = await rt.answer(second.approval_id, approve=False)
        assert denied.outcome is not None
        await rt.quiesce()

        sent, refused = results(x.requests[-1][0])
        assert sent == approved.outcome.as_result() and set(sent) == {
            "message_id", "mode", "recipient_state"}
        assert refused["error"] == PermissionDenied.code
        assert denied.outcome.as_result() == refused
        assert accepted_bodies(rt) == ["hello"]
        assert y.seen("hello") and not y.seen("again")
        assert await rt.pending_approvals() == []
        await rt.shutdown()
        store.close()

    run(main)


def test_a_pending_approval_survives_a_restart_and_the_answer_sends_once(
    tmp_path: Path,
) -> None:
    ids: dict[str, str] = {}

    def greeter(messages: Messages) -> ModelReply:
        return reply(send(ids["y"], "hello")) if turns(messages) == 0 else ModelReply(text="ok")

    async def first_life(store: LmdbStore) -> None:
        rt = runtime(store, _tree(Brain(greeter), Brain(lambda m: ModelReply(text="ok"))))
        await rt.start()
        sx, sy = await _siblings(rt)
        ids.update(x=sx.session_id, y=sy.session_id)
        rt.poke(sx.session_id)
        await _one_pending(rt)
        await until(lambda: rt.engine.session(sy.session_id).state == SessionState.FINISHED)
        # y's result wakes the root; let that run end too, so that the held call's run is
        # the only one the crash leaves behind.
        root = rt.engine.session(sx.parent_session_id or "")
        await until(lambda: rt.engine.session(root.session_id).state == SessionState.FINISHED)
        await rt.abandon()  # the process dies with the call held

    x2, y2 = Brain(greeter), Brain(lambda m: ModelReply(text="ok"))

    async def second_life(store: LmdbStore) -> None:
        rt = runtime(store, _tree(x2, y2))
        assert await rt.start() == 1  # the waiting run was found dead
        [held] = await rt.pending_approvals()
        answered = await rt.answer(held.approval_id, approve=True, scope="session")
        assert answered.outcome is not None
        await rt.quiesce()
        assert accepted_bodies(rt) == ["hello"] and y2.seen("hello")
        [consumed] = [e for _, e in rt.engine.feed()
                      if e.kind == EventKind.PRODUCER_MESSAGE_CONSUMED
                      and e.data["owner"] == "agent"]
        assert consumed.data["message_id"] == answered.outcome.as_result()["message_id"]

        # The sender's next run sees the outcome where its call was made.
        await rt.accept(ids["x"], "anything new?")
        await rt.quiesce()
        history = x2.requests[-1][0]
        held_call = [m for m in history if m["role"] == "tool"
                     and m["tool_call_id"] == held.tool_call_id]
        assert [m["content"] for m in held_call] == [answered.outcome.text()]
        assert accepted_bodies(rt) == ["hello"]  # the woken model did not send it again
        await rt.shutdown()

    two_lives(tmp_path, first_life, second_life)
