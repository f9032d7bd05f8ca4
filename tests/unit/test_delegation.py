"""Completing a delegation: once, by the first finished run, atomically with the finish."""

from __future__ import annotations

from tests.unit.conftest import World
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState
from treemail.core.records import Owner


def _notices(world: World, parent_id: str) -> list[str]:
    return [m.body for m in world.engine.pending(parent_id) if m.owner is Owner.DELEGATION]


def test_first_finished_run_reports_once_and_wakes_the_parent(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    child = world.child(root, "kid", {"parent": "allow"})
    run = world.activate(child)
    request = world.engine.begin_request(child.session_id, run.run_id)
    world.engine.commit_request(child.session_id, run.run_id, request.request_id)
    assert world.engine.finish_run(child.session_id, run.run_id, "all done") is True
    # Stored as the child wrote it; the parent's model reads it in a <subagent_result>.
    assert _notices(world, root.session_id) == ["all done"]
    assert world.fresh(root).state == SessionState.QUEUED  # woken by the notice
    kinds = [e.kind for e in world.engine.events(child.session_id)]
    assert kinds[-1] == EventKind.DELEGATION_COMPLETED and kinds[-2] == EventKind.RUN_FINISHED
    # Woken by mail later, the child finishes again: no second notice.
    world.send(root, child, "one more thing")
    again = world.engine.start_run(child.session_id)
    world.engine.finish_run(child.session_id, again.run_id)  # nothing claimed: still fine
    later = world.activate(child)
    assert world.engine.finish_run(child.session_id, later.run_id, "more") is False
    assert len(_notices(world, root.session_id)) == 1


def test_an_interrupted_first_run_leaves_the_report_to_the_run_that_finishes(
    world: World,
) -> None:
    root = world.root("root", {"child": "allow"})
    child = world.child(root, "kid")
    first = world.activate(child)
    world.engine.cancel_run(child.session_id, first.run_id, "model error")
    second = world.activate(child)
    assert world.engine.finish_run(child.session_id, second.run_id, "late") is True
    assert len(_notices(world, root.session_id)) == 1


def test_a_root_or_a_finish_without_result_reports_nothing(world: World) -> None:
    root = world.root("root")
    run = world.activate(root)
    assert world.engine.finish_run(root.session_id, run.run_id, "done") is False
    child = world.child(root, "kid")
    child_run = world.activate(child)
    assert world.engine.finish_run(child.session_id, child_run.run_id) is False
    assert _notices(world, root.session_id) == []
