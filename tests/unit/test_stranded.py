"""stranded_delegations: exactly the delegated sessions a crash left with nothing to wake them."""

from __future__ import annotations

from tests.unit.conftest import World
from treemail.core.lifecycle import SessionState
from treemail.core.records import Owner, Session


def _consume_task(world: World, child: Session) -> str:
    run = world.engine.start_run(child.session_id)
    request = world.engine.begin_request(child.session_id, run.run_id)
    world.engine.commit_request(child.session_id, run.run_id, request.request_id)
    return run.run_id


def _stranded(world: World) -> list[str]:
    return [s.session_id for s in world.engine.stranded_delegations()]


def test_a_child_whose_run_died_after_reading_its_task_is_stranded(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    child = world.child(root, "kid")
    _consume_task(world, child)
    assert _stranded(world) == []  # still running: not stranded yet
    world.restart()
    assert world.engine.recover() == 1
    assert _stranded(world) == [child.session_id]
    world.engine.accept(child.session_id, "resume", Owner.GOAL)
    assert _stranded(world) == []  # pending mail will wake it


def test_crash_of_a_root_or_of_a_run_that_left_mail_strands_nothing(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    world.activate(root)
    child = world.child(root, "kid")
    world.engine.start_run(child.session_id)  # the task is claimed by no request yet
    world.restart()
    assert world.engine.recover() == 2
    assert world.fresh(child).state == SessionState.QUEUED  # its task is still pending: it wakes
    assert _stranded(world) == []


def test_finished_cancelled_or_completed_runs_are_not_stranded(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    finished, cancelled, done = (world.child(root, name) for name in ("f", "c", "d"))
    world.engine.finish_run(finished.session_id, _consume_task(world, finished))
    world.engine.cancel_run(cancelled.session_id, _consume_task(world, cancelled), "by parent")
    world.engine.finish_run(done.session_id, _consume_task(world, done), "result")
    world.restart()
    world.engine.recover()
    assert _stranded(world) == []


def test_a_later_crash_after_a_finished_run_still_strands_an_unreported_child(
    world: World,
) -> None:
    root = world.root("root", {"child": "allow"})
    child = world.child(root, "kid")
    world.engine.finish_run(child.session_id, _consume_task(world, child))  # no result
    world.engine.accept(child.session_id, "more work", Owner.USER)
    _consume_task(world, child)
    world.restart()
    world.engine.recover()
    assert _stranded(world) == [child.session_id]


def test_a_root_or_a_reported_child_is_never_stranded(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    world.engine.accept(root.session_id, "work", Owner.USER)
    _consume_task(world, root)  # the root read its mail, then died: no parent to report to
    child = world.child(root, "kid")
    world.engine.finish_run(child.session_id, _consume_task(world, child), "reported")
    world.engine.accept(child.session_id, "one more thing", Owner.USER)
    _consume_task(world, child)  # a later run of a reported child dies too
    world.restart()
    assert world.engine.recover() == 2
    assert _stranded(world) == []


def test_a_resumed_child_that_finishes_without_result_is_not_stranded_again(
    world: World,
) -> None:
    root = world.root("root", {"child": "allow"})
    child = world.child(root, "kid")
    _consume_task(world, child)
    world.restart()
    world.engine.recover()
    world.engine.accept(child.session_id, "resume", Owner.GOAL)
    world.engine.finish_run(child.session_id, _consume_task(world, child))
    assert _stranded(world) == []
