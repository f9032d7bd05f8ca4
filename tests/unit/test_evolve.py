"""``transitions.evolve``, the copy every stored state change makes, is ``attrs.evolve``:
the same record for any change, keyword-only fields included, and an unknown field refused."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from treemail.core.lifecycle import MessageState
from treemail.core.records import Message, Mode, Owner, ToolContext
from treemail.core.transitions import evolve

_MAIL = Message("m1", "r1", "s1", Owner.AGENT, "body", Mode.QUEUE, 0, 1)


@pytest.mark.parametrize("changes", [
    {}, {"run_id": "run"}, {"state": MessageState.CLAIMED, "request_id": "q", "aged": 2.0},
    {"state": MessageState.CLAIMED.value},  # a plain str, through the converter as attrs.evolve
])
def test_evolve_is_attrs_evolve(changes: dict[str, Any]) -> None:
    made = evolve(_MAIL, **changes)
    assert made == attrs.evolve(_MAIL, **changes)
    assert made.state is attrs.evolve(_MAIL, **changes).state


def test_evolve_passes_keyword_only_fields_by_name() -> None:
    context = ToolContext("s1", "run", "call", replay_slot="slot")
    assert evolve(context, run_id="other") == attrs.evolve(context, run_id="other")
    assert evolve(context, replay_slot="new") == attrs.evolve(context, replay_slot="new")


def test_evolve_refuses_a_field_the_record_does_not_have() -> None:
    with pytest.raises(TypeError, match="no field 'colour'"):
        evolve(_MAIL, colour="red")
