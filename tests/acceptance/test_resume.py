"""A delegated run that dies after consuming its task is resumed at restart, not stranded."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.conftest import Brain, agent, open_store, reply, run, runtime
from treemail.core.engine import Engine
from treemail.core.events import EventKind, Reply
from treemail.core.ids import CountingIds
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner


def _crash_mid_delegation(path: Path) -> tuple[str, str]:
    """A child consumes its task in a committed request, then the process dies."""
    store = open_store(path)
    engine = Engine(store, CountingIds(namespace=99))
    lead = engine.create_root(AgentSpec("lead", rules=Rules.of({"child": "allow"})))
    child = engine.delegate(lead.session_id, AgentSpec("worker"), "count the files")
    child_run = engine.start_run(child.session_id)
    request = engine.begin_request(child.session_id, child_run.run_id)
    # as the runtime records a reply with its inputs
    output = Reply(tuple(d.text for d in request.deliveries), "Counting...")
    engine.commit_request(child.session_id, child_run.run_id, request.request_id, output)
    store.close()  # no finish: the run dies with the process
    return lead.session_id, child.session_id


def test_a_stranded_delegation_is_resumed_and_completes_once(tmp_path: Path) -> None:
    lead_id, child_id = _crash_mid_delegation(tmp_path)
    worker = Brain(lambda messages: reply(text="42 files"))
    lead = Brain(lambda messages: reply(text="thanks"))

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", {"child": "allow"}, lead),
                             "worker": agent("worker", None, worker)})
        assert await rt.start() == 1
        await rt.quiesce()
        engine = rt.engine
        goal = [m for m in engine.events(child_id) if m.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                and m.data.get("owner") == Owner.GOAL.value]
        assert len(goal) == 1  # resumed by goal mail, exactly once
        assert worker.seen("count the files") and worker.seen("The process restarted")
        notices = [e for e in engine.events(lead_id)
                   if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                   and e.data.get("owner") == Owner.DELEGATION.value]
        assert len(notices) == 1 and "42 files" in str(notices[0].data["body"])
        assert engine.stranded_delegations() == []
        await rt.shutdown()
        store.close()

    run(main)


def test_a_cancelled_or_completed_child_is_not_stranded(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    engine = Engine(store, CountingIds())
    lead = engine.create_root(AgentSpec("lead", rules=Rules.of({"child": "allow"})))
    cancelled = engine.delegate(lead.session_id, AgentSpec("a"), "task a")
    done = engine.delegate(lead.session_id, AgentSpec("b"), "task b")
    for child in (cancelled, done):
        child_run = engine.start_run(child.session_id)
        request = engine.begin_request(child.session_id, child_run.run_id)
        engine.commit_request(child.session_id, child_run.run_id, request.request_id)
        if child is cancelled:
            engine.cancel_run(child.session_id, child_run.run_id, "cancelled by parent")
        else:
            engine.finish_run(child.session_id, child_run.run_id, "done")
    assert engine.recover() == 0
    assert engine.stranded_delegations() == []
    store.close()
