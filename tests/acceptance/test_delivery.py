"""Delivery through the live runtime: steer into a running child, queue for a queued one,
wake a finished one without reopening its delegation."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acceptance.conftest import (
    Brain,
    Messages,
    agent,
    call,
    delegate,
    events,
    on_user,
    open_store,
    payloads,
    reply,
    results,
    run,
    runtime,
    send,
    turns,
    until,
)
from treemail.adapters.runtime.llm import ModelReply
from treemail.core.envelope import render_envelope
from treemail.core.events import EventKind, RequestBegun
from treemail.core.lifecycle import RunState, SessionState
from treemail.core.records import RecipientState


def test_steer_joins_the_next_boundary_of_a_running_child(tmp_path: Path) -> None:
    ids: dict[str, str] = {}

    def worker(messages: Messages) -> ModelReply:
        # A first step with a tool call, so the run has a second boundary to steer into.
        if turns(messages) == 0:
            return reply(send(ids["lead"], "working on it"))
        return ModelReply(text="done")

    lead = Brain(on_user({"steer": lambda: reply(send(ids["child"], "also check tests"))}))
    child = Brain(worker, hold=lambda m: turns(m) == 0)

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", {"child": "allow"}, lead),
                             "worker": agent("worker", {"parent": "allow"}, child)})
        await rt.start()
        root = await rt.create_root("lead")
        ids["lead"] = root.session_id
        kid = await delegate(rt, root, "worker", "explore src/")
        ids["child"] = kid.session_id
        await child.held.wait()  # the child is running, inside its first model request
        await rt.accept(root.session_id, "steer your child")
        await until(lambda: rt.engine.session(root.session_id).state == SessionState.FINISHED)
        [sent] = results(lead.requests[-1][0])
        assert (sent["mode"], sent["recipient_state"]) == ("steer", RecipientState.RUNNING)
        child.release.set()
        await rt.quiesce()

        [run1] = [e.data["run_id"] for e in events(rt, kid, EventKind.RUN_STARTED)][:1]
        [admitted] = [e for e in events(rt, kid, EventKind.PRODUCER_MESSAGE_ADMITTED)
                      if e.data["message_id"] == sent["message_id"]]
        assert admitted.data["run_id"] == run1  # joined the in-flight run, not the next one
        begun = [b for b in payloads(rt, kid, RequestBegun) if b.run_id == run1]
        assert [sent["message_id"] in b.message_ids for b in begun] == [False, True]
        envelope = render_envelope(root.reference, "also check tests", reply_hint=True)
        assert child.inputs(1) == [envelope]  # the second request of the same run
        await rt.shutdown()
        store.close()

    run(main)


def test_a_queued_child_claims_the_message_when_its_run_starts(tmp_path: Path) -> None:
    ids: dict[str, str] = {}
    lead = Brain(on_user({"tell": lambda: reply(send(ids["child"], "read the docs too"))}))
    child = Brain(lambda m: ModelReply(text="done"))

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", {"child": "allow"}, lead),
                             "worker": agent("worker", {"parent": "allow"}, child)})
        await rt.start()
        root = await rt.create_root("lead")
        kid = await delegate(rt, root, "worker", "explore src/", start=False)
        ids["child"] = kid.session_id
        assert rt.engine.session(kid.session_id).state == SessionState.QUEUED
        await rt.accept(root.session_id, "tell the child")
        await rt.quiesce()

        [sent] = results(lead.requests[-1][0])
        assert (sent["mode"], sent["recipient_state"]) == ("queue", RecipientState.QUEUED)
        [admitted] = [e for e in events(rt, kid, EventKind.PRODUCER_MESSAGE_ADMITTED)
                      if e.data["message_id"] == sent["message_id"]]
        assert admitted.data["run_id"] is None  # durably waiting for the next run
        [first, *_] = payloads(rt, kid, RequestBegun)
        assert sent["message_id"] in first.message_ids
        envelope = render_envelope(root.reference, "read the docs too", reply_hint=True)
        assert child.inputs(0) == ["explore src/", envelope]
        await rt.shutdown()
        store.close()

    run(main)


def test_a_finished_child_wakes_with_the_message_and_its_delegation_stays_done(
    tmp_path: Path,
) -> None:
    handles: dict[str, str] = {}

    def delegated() -> ModelReply:
        return reply(call("delegate_subagent", agent="worker", task="map the repo",
                          description=None))

    def lead_respond(messages: Messages) -> ModelReply:
        last = messages[-1]
        if last["role"] == "tool" and "handle" in last["content"]:
            handles["child"] = json.loads(last["content"])["handle"]
        return on_user({
            "start": delegated,
            "follow": lambda: reply(send(handles["child"], "what about tests/?")),
            "check": lambda: reply(call("get_subagent_result", to=handles["child"])),
        })(messages)

    def worker(messages: Messages) -> ModelReply:
        return ModelReply(text=f"report {turns(messages) + 1}")

    lead, child = Brain(lead_respond), Brain(worker)

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", {"child": "allow"}, lead),
                             "worker": agent("worker", {"parent": "allow"}, child)},
                     idle_timeout=0.05)
        await rt.start()
        root = await rt.create_root("lead")
        await rt.accept(root.session_id, "start")
        await rt.quiesce()
        [kid] = [s for s in rt.engine.sessions() if s.parent_session_id == root.session_id]
        assert rt.engine.session(kid.session_id).state == SessionState.FINISHED
        await until(lambda: not rt.resident(kid.session_id))  # evicted while finished

        await rt.accept(root.session_id, "follow up")
        await rt.quiesce()
        sent = [r for r in results(lead.requests[-1][0]) if "recipient_state" in r][-1]
        assert (sent["mode"], sent["recipient_state"]) == ("queue", RecipientState.WAKING_FINISHED)
        envelope = render_envelope(root.reference, "what about tests/?", reply_hint=True)
        assert child.inputs(-1) == [envelope]  # resumed with the message as its input
        assert [e.data["run_number"] for e in events(rt, kid, EventKind.RUN_FINISHED)] == [1, 2]

        notices = [e for e in events(rt, root, EventKind.PRODUCER_MESSAGE_ACCEPTED)
                   if e.data["owner"] == "delegation"]
        assert len(notices) == 1 and "report 1" in str(notices[0].data["body"])
        await rt.accept(root.session_id, "check the child")
        await rt.quiesce()
        assert results(lead.requests[-1][0])[-1] == {"status": RunState.FINISHED,
                                                      "result": "report 1"}
        await rt.shutdown()
        store.close()

    run(main)
