"""An unknown reference lists at most ``MAX_CANDIDATES`` peers, nearest first."""

from __future__ import annotations

import pytest

from tests.unit.conftest import World
from treemail.core.addressing import MAX_CANDIDATES
from treemail.core.errors import UnknownSubagentReference
from treemail.core.records import Session


def _miss(world: World, sender: Session) -> UnknownSubagentReference:
    with pytest.raises(UnknownSubagentReference) as caught:
        world.send(sender, "nobody_00000000")
    return caught.value


def test_a_big_tree_lists_twenty_nearest_peers_and_counts_the_rest(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    strangers = [world.child(root, f"s{i}") for i in range(30)]
    parent = strangers[-1]
    me = world.child(parent, "me", {"*": "allow"})
    siblings = [world.child(parent, f"sib{i}") for i in range(3)]
    kids = [world.child(me, f"kid{i}") for i in range(2)]
    error = _miss(world, me)
    listed = error.details["candidates"]
    # Parent, then children, then siblings, then the rest in creation order.
    nearest = [parent, *kids, *siblings]
    rest = [root, *strangers[:-1]]
    expected = [s.session_id for s in nearest + rest][:MAX_CANDIDATES]
    assert listed == expected
    total = len(nearest) + len(rest)
    assert error.details["more"] == total - MAX_CANDIDATES
    assert f"... and {total - MAX_CANDIDATES} more, not listed" in error.message
    assert error.message.count("\n- ") == MAX_CANDIDATES


def test_a_thousand_peers_give_a_small_tool_result(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    for i in range(1000):
        world.child(root, f"p{i}")
    error = _miss(world, root)
    assert len(error.message.encode()) < 4096  # it was 291 KB
    assert error.details["more"] == 1000 - MAX_CANDIDATES


def test_a_small_tree_lists_everyone_and_no_count(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid")
    error = _miss(world, root)
    assert error.details["candidates"] == [kid.session_id]
    assert error.details["more"] == 0
    assert "more, not listed" not in error.message
