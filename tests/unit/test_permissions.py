"""Message permissions: relationship labels, rule precedence, deny by default, visibility."""

from __future__ import annotations

import pytest

from tests.unit.conftest import World
from treemail.core.errors import AgentDocError
from treemail.core.permissions import Action, Rules, relationship
from treemail.core.records import Session
from treemail.core.sending import label_between


def _label(sender: Session, recipient: Session) -> str:
    return label_between(sender, recipient)


# -- labels, from pure origin metadata ---------------------------------------------------


@pytest.mark.parametrize(
    ("sender", "sender_parent", "recipient", "recipient_parent", "label"),
    [
        ("c", "p", "p", None, "parent"),
        ("p", None, "c", "p", "child"),
        ("a", "p", "b", "p", "sibling"),
        ("g", "c", "p", None, "*"),  # grandparent
        ("p", None, "g", "c", "*"),  # grandchild
        ("g", "c", "d", "p", "*"),  # uncle
        ("a", None, "b", None, "*"),  # two roots are not siblings
        ("a", "r1", "b", "r2", "*"),  # children of two different roots
    ],
)
def test_relationship_labels(
    sender: str, sender_parent: str | None, recipient: str, recipient_parent: str | None,
    label: str,
) -> None:
    assert relationship(sender, sender_parent, recipient, recipient_parent) == label


def test_labels_from_stored_sessions(world: World) -> None:
    root = world.root()
    a = world.child(root, "a")
    b = world.child(root, "b")
    a1 = world.child(a, "a1")
    b1 = world.child(b, "b1")
    other = world.root("other")
    other_child = world.child(other, "oc")
    assert _label(a, root) == "parent"
    assert _label(root, a) == "child"
    assert _label(a, b) == "sibling"
    assert _label(b, a) == "sibling"
    assert _label(a1, root) == "*"  # grandparent
    assert _label(root, a1) == "*"  # grandchild
    assert _label(a1, b) == "*"  # uncle
    assert _label(a1, b1) == "*"  # cousin
    assert _label(a, other_child) == "*"  # children of two roots are not siblings
    assert _label(root, other) == "*"


# -- precedence ------------------------------------------------------------------------------


def test_exact_label_beats_wildcard_either_way() -> None:
    rules = Rules.of({"*": "deny", "child": "allow"})
    assert rules.decide("child") is Action.ALLOW
    assert rules.decide("parent") is Action.DENY
    rules = Rules.of({"*": "allow", "child": "deny"})
    assert rules.decide("child") is Action.DENY
    assert rules.decide("sibling") is Action.ALLOW


def test_exact_beats_a_longer_wildcard() -> None:
    rules = Rules.of({"sib*": "deny", "sibling": "allow"})
    assert rules.decide("sibling") is Action.ALLOW


def test_longer_wildcard_beats_shorter() -> None:
    rules = Rules.of({"*": "deny", "s*": "allow", "sib*": "ask"})
    assert rules.decide("sibling") is Action.ASK
    assert rules.decide("sx") is Action.ALLOW
    assert rules.decide("parent") is Action.DENY
    assert Rules.of({"*": "allow", "p*": "deny"}).decide("parent") is Action.DENY


@pytest.mark.parametrize(
    ("first", "second", "winner"),
    [
        ("allow", "deny", Action.DENY),
        ("deny", "allow", Action.DENY),
        ("allow", "ask", Action.ASK),
        ("ask", "deny", Action.DENY),
    ],
)
def test_more_restrictive_action_wins_a_tie(first: str, second: str, winner: Action) -> None:
    # Two wildcards of equal length that both match "sibling".
    assert Rules.of([("s*", first), ("*g", second)]).decide("sibling") is winner
    # The same exact label twice.
    assert Rules.of([("child", first), ("child", second)]).decide("child") is winner


def test_question_mark_and_class_wildcards_match() -> None:
    rules = Rules.of({"?hild": "allow", "[ps]*": "ask"})
    assert rules.decide("child") is Action.ALLOW
    assert rules.decide("parent") is Action.ASK
    assert rules.decide("sibling") is Action.ASK
    assert rules.decide("*") is Action.DENY


@pytest.mark.parametrize("label", ["parent", "child", "sibling", "*"])
def test_no_rule_means_deny(label: str) -> None:
    assert Rules().decide(label) is Action.DENY
    assert Rules.parse(None).decide(label) is Action.DENY
    assert Rules.of({"nobody": "allow"}).decide(label) is Action.DENY


def test_star_label_matches_only_star_or_wildcards() -> None:
    assert Rules.of({"child": "allow"}).decide("*") is Action.DENY
    assert Rules.of({"*": "allow"}).decide("*") is Action.ALLOW


# -- visibility ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "visible"),
    [
        ({}, False),
        ({"*": "deny"}, False),
        ({"child": "deny", "parent": "deny"}, False),
        ({"child": "allow"}, True),
        ({"sibling": "ask"}, True),
        ({"*": "deny", "parent": "ask"}, True),
    ],
)
def test_tool_is_visible_only_with_an_allow_or_ask_rule(
    table: dict[str, str], visible: bool
) -> None:
    assert Rules.of(table).visible is visible


def test_engine_tool_visible_follows_the_rules(world: World) -> None:
    assert world.engine.tool_visible(world.root("a").session_id) is False
    assert world.engine.tool_visible(world.root("b", {"*": "deny"}).session_id) is False
    assert world.engine.tool_visible(world.root("c", {"child": "ask"}).session_id) is True


# -- parsing ---------------------------------------------------------------------------------


def test_parse_reads_a_frontmatter_table() -> None:
    rules = Rules.parse({"child": "allow", "parent": "ask", "*": "deny"}, "doc.md")
    assert rules.decide("child") is Action.ALLOW
    assert rules.decide("parent") is Action.ASK
    assert rules.decide("sibling") is Action.DENY


def _parse_error(table: object) -> AgentDocError:
    with pytest.raises(AgentDocError) as caught:
        Rules.parse(table, "agents/x.md")  # type: ignore[arg-type]
    assert caught.value.code == AgentDocError.code
    assert caught.value.details["source"] == "agents/x.md"
    assert "agents/x.md" in caught.value.message
    return caught.value


@pytest.mark.parametrize("table", [["child", "allow"], "allow", 3])
def test_parse_refuses_a_non_mapping(table: object) -> None:
    error = _parse_error(table)
    assert error.details["field"] == "permissions.message"
    assert "permissions.message" in error.message


@pytest.mark.parametrize("action", ["permit", "ALLOW", "", None, True, 1])
def test_parse_refuses_a_bad_action_naming_the_field(action: object) -> None:
    error = _parse_error({"child": action})
    assert error.details["field"] == "permissions.message.child"
    assert "permissions.message.child" in error.message


@pytest.mark.parametrize("pattern", ["", 7, None])
def test_parse_refuses_a_bad_label_naming_the_field(pattern: object) -> None:
    error = _parse_error({pattern: "allow"})
    assert error.details["field"] == f"permissions.message.{pattern}"


def test_of_refuses_a_bad_action() -> None:
    with pytest.raises(AgentDocError) as caught:
        Rules.of({"child": "yes"})
    assert caught.value.details["field"] == "permissions.message.child"


def test_a_decision_is_remembered_for_its_rule_set_alone() -> None:
    """``decide`` remembers by the rule set's identity: another set, equal or not, made
    while the first is kept, gets its own answer."""
    allow, deny = Rules.of({"*": "allow"}), Rules.of({"*": "deny"})
    for _ in range(2):
        assert allow.decide("child") is Action.ALLOW
        assert deny.decide("child") is Action.DENY
        assert Rules.of({"*": "allow"}).decide("child") is Action.ALLOW
        assert Rules.of({"child": "ask"}).decide("child") is Action.ASK


def test_a_full_memory_of_decisions_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    from treemail.core import permissions

    monkeypatch.setattr(permissions, "_DECIDED_LIMIT", 3)
    monkeypatch.setattr(permissions, "_DECIDED", {})
    sets = [Rules.of({"*": "allow"}), Rules.of({"*": "deny"})] * 3
    for _ in range(2):
        for rules, expected in zip(sets, [Action.ALLOW, Action.DENY] * 3, strict=True):
            assert rules.decide("child") is expected
            assert rules.decide("parent") is expected
    assert 0 < len(permissions._DECIDED) <= 3
