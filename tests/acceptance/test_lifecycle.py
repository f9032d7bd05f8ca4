"""The runtime's own lifecycle: a restart (a kill) before delivery still delivers, a send that
races shutdown is refused and nothing accepted is lost, idle actors are evicted and mail
spawns them again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.acceptance.conftest import (
    Brain,
    Messages,
    agent,
    call,
    delegate,
    events,
    feed_kinds,
    on_user,
    open_store,
    payloads,
    reply,
    results,
    run,
    runtime,
    send,
    turns,
    two_lives,
    until,
)
from treemail.adapters.runtime.llm import ModelReply, ToolCall
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import EngineShutdown, ToolInterrupted
from treemail.core.events import EventKind, ToolResults
from treemail.core.lifecycle import SessionState
from treemail.core.records import Session


def _pair(lead: Brain, worker: Brain) -> dict[str, Agent]:
    return {"lead": agent("lead", {"child": "allow"}, lead),
            "worker": agent("worker", {"parent": "allow"}, worker)}


def _says(text: str) -> ModelReply:
    return ModelReply(text=text)


def test_a_restart_before_delivery_still_delivers_exactly_once(tmp_path: Path) -> None:
    ids: dict[str, str] = {}

    def lead_brain() -> Brain:
        return Brain(on_user({"go": lambda: reply(send(ids["child"], "urgent: stop"))}))

    def urgent(messages: Messages) -> bool:
        return any("urgent" in str(m["content"]) for m in messages)

    async def first_life(store: LmdbStore) -> None:
        worker = Brain(lambda m: _says("done"), hold=urgent)
        rt = runtime(store, _pair(lead_brain(), worker))
        await rt.start()
        root = await rt.create_root("lead")
        ids["child"] = (await delegate(rt, root, "worker", "map the repo")).session_id
        await rt.quiesce()
        await rt.accept(root.session_id, "go")
        await worker.held.wait()  # the message is claimed into a request that never commits
        await rt.abandon()

    worker2 = Brain(lambda m: _says("stopped"))

    async def second_life(store: LmdbStore) -> None:
        rt = runtime(store, _pair(lead_brain(), worker2))
        assert await rt.start() == 1
        await rt.quiesce()
        assert worker2.seen("urgent: stop")
        [message_id] = feed_kinds(rt, EventKind.PRODUCER_MESSAGE_ACCEPTED)
        assert feed_kinds(rt, EventKind.PRODUCER_MESSAGE_RELEASED) == {message_id: 1}  # by recovery
        assert feed_kinds(rt, EventKind.PRODUCER_MESSAGE_CONSUMED) == {message_id: 1}
        await rt.shutdown()

    two_lives(tmp_path, first_life, second_life)


def test_a_send_racing_shutdown_is_refused_and_accepted_mail_survives(tmp_path: Path) -> None:
    ids: dict[str, str] = {}
    stopping: list[asyncio.Task[None]] = []

    async def shut_down_now(messages: Messages) -> None:
        # The lead's second request starts the shutdown; its reply's send then races it.
        if turns(messages) == 1 and not stopping:
            stopping.append(asyncio.create_task(runtime_box[0].shutdown(grace=0.2)))
            await asyncio.sleep(0)

    def lead_respond(messages: Messages) -> ModelReply:
        n = turns(messages)
        if n < 2:
            return reply(send(ids["child"], ["first", "second"][n]))
        return _says("done")

    lead = Brain(lead_respond, pause=shut_down_now)
    stuck = Brain(lambda m: _says("never"), hold=lambda m: True)  # busy past the grace
    runtime_box: list[Runtime] = []

    async def first_life(store: LmdbStore) -> None:
        rt = runtime(store, _pair(lead, stuck))
        runtime_box.append(rt)
        await rt.start()
        root = await rt.create_root("lead")
        ids["child"] = (await delegate(rt, root, "worker", "map the repo")).session_id
        await stuck.held.wait()
        await rt.accept(root.session_id, "go")
        await until(lambda: bool(stopping))
        await stopping[0]
        first, second = [r for p in payloads(rt, root, ToolResults) for r in p.results]
        assert "message_id" in first.content
        assert EngineShutdown.code in second.content
        assert not stuck.seen("first")  # accepted, never delivered in this life

    worker2 = Brain(lambda m: _says("read it"))

    async def second_life(store: LmdbStore) -> None:
        rt = runtime(store, _pair(Brain(lambda m: _says("ok")), worker2))
        assert await rt.start() == 0  # shutdown left no run running
        await rt.quiesce()
        assert worker2.seen("first") and not worker2.seen("second")
        [message_id] = feed_kinds(rt, EventKind.PRODUCER_MESSAGE_ACCEPTED)
        assert feed_kinds(rt, EventKind.PRODUCER_MESSAGE_CONSUMED) == {message_id: 1}
        await rt.shutdown()

    two_lives(tmp_path, first_life, second_life)


def test_idle_actors_are_evicted_and_mail_spawns_them_again(tmp_path: Path) -> None:
    lead = Brain(lambda m: _says(f"reply {turns(m) + 1}"))

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, _pair(lead, Brain(lambda m: _says("ok"))), idle_timeout=0.05)
        await rt.start()
        root = await rt.create_root("lead")
        await rt.accept(root.session_id, "hello")
        await rt.quiesce()
        # Evicted once idle past the timeout: counted, since by the time quiesce returns on a
        # busy machine the 0.05 s may already have passed, and "still resident" would race it.
        await until(lambda: rt.evictions == 1)
        assert not rt.resident(root.session_id)

        await rt.accept(root.session_id, "still there?")
        assert rt.resident(root.session_id)  # the mail spawned it again
        await rt.quiesce()
        # The respawned actor rebuilt the conversation from the durable log.
        # The conversation after the system prompt (the lead may send: it has one).
        assert [m["content"] for m in lead.requests[-1][0] if m["role"] != "system"] == [
            "hello", "reply 1", "still there?"]
        assert results(lead.requests[-1][0]) == []
        await until(lambda: not rt.resident(root.session_id))
        assert rt.evictions == 2
        await rt.shutdown()
        store.close()

    run(main)


class Stall:
    """A tool gate that stalls the call sending ``body``, so a test can kill mid-tools."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.stalled = asyncio.Event()

    async def tool_before_call(self, session: Session, call: ToolCall) -> None:
        if self.body in str(call.arguments):
            self.stalled.set()
            await asyncio.Event().wait()


def test_a_run_killed_mid_tools_leaves_a_transcript_the_next_run_can_trust(
    tmp_path: Path,
) -> None:
    ids: dict[str, str] = {}
    lead = Brain(on_user({"go": lambda: reply(send(ids["child"], "part a"),
                                              send(ids["child"], "part b"))}))
    stall = Stall("part b")

    async def first_life(store: LmdbStore) -> None:
        rt = runtime(store, _pair(lead, Brain(lambda m: _says("ok"))), plugins=[stall])
        await rt.start()
        root = await rt.create_root("lead")
        ids["root"] = root.session_id
        ids["child"] = (await delegate(rt, root, "worker", "wait", start=False)).session_id
        await rt.accept(root.session_id, "go")
        await stall.stalled.wait()  # part a is accepted, its result not yet recorded
        await rt.abandon()

    lead2 = Brain(lambda m: _says("resumed"))

    async def second_life(store: LmdbStore) -> None:
        rt = runtime(store, _pair(lead2, Brain(lambda m: _says("ok"))))
        await rt.start()
        await rt.accept(ids["root"], "where were we?")
        await rt.quiesce()
        sent, lost = results(lead2.requests[-1][0])
        [message_id] = feed_kinds(rt, EventKind.PRODUCER_MESSAGE_ACCEPTED)
        assert sent["message_id"] == message_id  # from the idempotency record
        assert lost["error"] == ToolInterrupted.code
        assert feed_kinds(rt, EventKind.PRODUCER_MESSAGE_CONSUMED) == {message_id: 1}
        await rt.shutdown()

    two_lives(tmp_path, first_life, second_life)


def test_cancelling_a_running_child_stops_its_actor_cleanly(tmp_path: Path) -> None:
    ids: dict[str, str] = {}
    lead = Brain(on_user({"cancel": lambda: reply(call("cancel_subagent", to=ids["child"])),
                          "status": lambda: reply(call("get_subagent_result",
                                                       to=ids["child"]))}))

    def busy(messages: Messages) -> ModelReply:
        return reply(call("look_around")) if turns(messages) == 0 else _says("done")

    worker = Brain(busy, hold=lambda m: turns(m) == 1)  # its second request hangs

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, _pair(lead, worker))
        await rt.start()
        root = await rt.create_root("lead")
        kid = await delegate(rt, root, "worker", "map the repo")
        ids["child"] = kid.session_id
        await worker.held.wait()
        await rt.accept(root.session_id, "cancel it")
        await until(lambda: rt.engine.session(root.session_id).state == SessionState.FINISHED)
        assert results(lead.requests[-1][0]) == [{"cancelled": True}]
        worker.release.set()
        await rt.accept(root.session_id, "status?")
        await rt.quiesce()  # raises if the child's actor crashed on its dead run
        assert results(lead.requests[-1][0])[-1] == {"status": SessionState.IDLE, "result": None}
        [stopped] = events(rt, kid, EventKind.RUN_INTERRUPTED)
        assert stopped.data["reason"] == "cancelled by parent"
        assert len(worker.requests) == 1  # the hung second request was never answered
        await rt.shutdown()
        store.close()

    run(main)
