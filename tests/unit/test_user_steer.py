"""User steering (``accept`` with mode steer): it joins the in-flight run at its next safe
boundary, needs no message rule, and waits for the next run when none is in flight; the
engine and the reference model agree on every step."""

from __future__ import annotations

from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import AgentSpec, Mode, Owner
from treemail.models.reference import Reference

NO_RULES = AgentSpec("solo")  # no message rule at all: the user needs none


def test_a_user_steer_joins_the_running_run_at_its_next_boundary() -> None:
    engine = Engine(MemoryStore(), CountingIds())
    model = Reference(MessagingConfig(), CountingIds())
    sid = engine.create_root(NO_RULES).session_id
    assert model.create_root(NO_RULES) == sid
    for world in (engine, model):
        world.accept(sid, "start", Owner.USER)
    run = engine.start_run(sid)
    assert model.start_run(sid) == run.run_id
    first = engine.begin_request(sid, run.run_id)
    model_first = model.begin_request(sid, run.run_id)
    assert [d.text for d in first.deliveries] == [t for _, _, t in model_first[2]] == ["start"]
    engine.commit_request(sid, run.run_id, first.request_id)
    model.commit_request(sid, run.run_id, first.request_id)

    steer = engine.accept(sid, "look at X too", Owner.USER, mode=Mode.STEER)
    assert model.accept(sid, "look at X too", Owner.USER, mode=Mode.STEER) == steer
    assert engine.message(steer).run_id == run.run_id  # bound to the run in flight
    queued = engine.accept(sid, "later", Owner.USER)
    assert model.accept(sid, "later", Owner.USER) == queued
    assert engine.message(queued).run_id is None  # queue mode waits for the next run

    second = engine.begin_request(sid, run.run_id)
    model_second = model.begin_request(sid, run.run_id)
    assert [d.text for d in second.deliveries] == [t for _, _, t in model_second[2]] == \
        ["look at X too"]


def test_a_user_steer_to_a_session_without_a_run_waits_for_the_next_run() -> None:
    engine = Engine(MemoryStore(), CountingIds())
    sid = engine.create_root(NO_RULES).session_id
    steer = engine.accept(sid, "steer while idle", Owner.USER, mode=Mode.STEER)
    assert engine.message(steer).state == MessageState.ADMITTED
    assert engine.message(steer).run_id is None
    run = engine.start_run(sid)
    request = engine.begin_request(sid, run.run_id)
    assert [d.text for d in request.deliveries] == ["steer while idle"]
