"""Text no store can hold (a lone surrogate) entering a session as user, plugin or delegation
mail: refused with a typed error on every store, and the store is left as it was."""

from __future__ import annotations

import pytest

from tests.unit.conftest import World
from treemail.core.errors import InvalidRequest
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner

HOSTILE = ("\ud800", "hi \udfff there", "\udbff\udc00 not a pair once escaped" + "\ud800")


@pytest.mark.parametrize("owner", [Owner.USER, Owner.PLUGIN])
@pytest.mark.parametrize("text", HOSTILE)
def test_mail_with_a_lone_surrogate_is_refused_typed(world: World, owner: Owner,
                                                     text: str) -> None:
    # It used to raise UnicodeEncodeError on LMDB and be stored as is in memory.
    root = world.root("root", {"child": "allow"})
    before = world.snapshot()
    with pytest.raises(InvalidRequest) as refused:
        world.engine.accept(root.session_id, text, owner)
    assert "lone surrogate" in refused.value.message
    assert world.snapshot() == before


def test_a_delegation_task_with_a_lone_surrogate_is_refused_typed(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    before = world.snapshot()
    with pytest.raises(InvalidRequest):
        world.engine.delegate(root.session_id, AgentSpec("kid", "helps", Rules.of({})),
                              "do \ud800 this")
    assert world.snapshot() == before


def test_paired_astral_text_is_stored_unchanged(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    message_id = world.engine.accept(root.session_id, "ok 😀 \U0010fffd", Owner.USER)
    assert world.engine.message(message_id).body == "ok 😀 \U0010fffd"
