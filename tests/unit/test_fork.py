"""Forking a session's history: a new branch beside the source, mail left where it was."""

from __future__ import annotations

from tests.unit.conftest import World
from treemail.adapters.runtime.history import rebuild
from treemail.core.events import EventKind, Reply
from treemail.core.records import Owner


def test_fork_is_a_sibling_with_its_own_handle_and_no_inherited_mail(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    pending_before = [m.message_id for m in world.engine.pending(kid.session_id)]
    fork = world.engine.fork(kid.session_id)
    assert (fork.root_session_id, fork.parent_session_id) == (root.session_id, root.session_id)
    assert fork.handle not in (None, kid.handle) and fork.agent == kid.agent
    assert world.engine.pending(fork.session_id) == []
    assert [m.message_id for m in world.engine.pending(kid.session_id)] == pending_before
    forked = [e for e in world.engine.events(fork.session_id) if e.kind == EventKind.SESSION_FORKED]
    last = world.engine.events(kid.session_id)[-1].seq
    assert [e.data for e in forked] == [{"from": kid.session_id, "upto": last}]
    # The fork is a live peer: reachable by handle, and reverting the source spares it.
    world.engine.revert(kid.session_id)
    world.send(root, fork.reference, "you are the branch we keep")
    assert len(world.engine.pending(fork.session_id)) == 1


def test_forking_a_root_starts_a_tree_of_its_own(world: World) -> None:
    root = world.root("root")
    fork = world.engine.fork(root.session_id)
    assert fork.root_session_id == fork.session_id != root.session_id
    assert fork.parent_session_id is None


def test_a_fork_remembers_the_source_conversation_up_to_the_fork(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    run = world.activate(root)
    request = world.engine.begin_request(root.session_id, run.run_id)
    output = Reply(tuple(d.text for d in request.deliveries), "before")
    world.engine.commit_request(root.session_id, run.run_id, request.request_id, output)
    fork = world.engine.fork(root.session_id)
    later = world.engine.begin_request(root.session_id, run.run_id)
    world.engine.commit_request(root.session_id, run.run_id, later.request_id,
                                Reply(text="after the fork"))
    world.engine.accept(fork.session_id, "a question for the fork", Owner.USER)
    fork_run = world.engine.start_run(fork.session_id)
    asked = world.engine.begin_request(fork.session_id, fork_run.run_id)
    world.engine.commit_request(fork.session_id, fork_run.run_id, asked.request_id,
                                Reply(tuple(d.text for d in asked.deliveries), "mine"))
    with world.store.read() as tx:
        said = [m["content"] for m in rebuild(tx, fork.session_id) if m["role"] == "assistant"]
    assert said == ["before", "mine"]


def test_a_legacy_session_forks_into_a_legacy_session(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    legacy = world.child(root, "old", legacy=True)
    fork = world.engine.fork(legacy.session_id)
    assert fork.handle is None and fork.reference == fork.session_id
