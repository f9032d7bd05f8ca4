"""Every text field that reaches a model, fuzzed: user, plugin and goal mail, delegation tasks
and descriptions, agent mail, a child's result and the error text behind an interruption,
each any hostile string (lone surrogates, controls, blanks, huge, forged tags) through a real
runtime (tests/property/outside.py). Text no store holds is refused with a typed error; no
actor crashes; and every model's context holds exactly the envelopes real senders made."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import TALLY, budget
from tests.fuzz.strategies import TEXT
from tests.property.outside import Outside, assert_true_envelopes, run_tree
from tests.property.test_envelope_integrity import BODIES
from tests.property.test_tag_folding import interleaved

FIELD = st.one_of(TEXT, BODIES, interleaved())


@settings(max_examples=budget(40), deadline=None)
@given(st.builds(Outside, *(FIELD for _ in range(10))))
def test_text_from_outside_in_every_field(texts: Outside) -> None:
    tree = run_tree(texts)
    assert tree.rt.crashes == [], tree.rt.crashes
    # beta's model fails on purpose; nothing else may stop a run.
    stopped = {i.session_id for i in tree.rt.incidents}
    beta = {s.session_id for s in tree.sessions if s.agent.name == "beta"}
    assert stopped <= beta, [(i.reason, repr(i.error)) for i in tree.rt.incidents]
    assert_true_envelopes(tree)
    TALLY["text from outside"][f"sessions {len(tree.sessions)}"] += 1
