"""Hostile and careless agent docs end in a typed ``AgentDocError``, fast."""

from __future__ import annotations

import pytest

from treemail.core.agents import parse_agent_doc
from treemail.core.errors import AgentDocError
from treemail.core.frontmatter import MAX_DEPTH, MAX_FRONTMATTER_CHARS


def _doc(frontmatter: str) -> str:
    return f"---\n{frontmatter}\n---\nprompt\n"


def _refused(frontmatter: str) -> AgentDocError:
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(_doc(frontmatter), source="a.md")
    assert caught.value.code == AgentDocError.code
    assert str(caught.value.message).startswith("a.md: ")
    return caught.value


# The 424-byte doc that took 25 s to load: nine levels of nine aliases each.
_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
    for i in range(9)
)


def test_an_alias_bomb_is_refused_at_its_first_alias() -> None:
    error = _refused("name: bomb\n" + _BOMB)
    assert error.details["problem"] == "alias"
    assert len(error.message) < 300  # the message names the alias, it expands nothing


def test_a_single_alias_is_refused_too() -> None:
    assert _refused("name: &n x\ndescription: *n").details["problem"] == "alias"


@pytest.mark.parametrize(("frontmatter", "problem"), [
    ('name: a\ndescription: !!timestamp 2020-02-30', "bad_value"),
    ('name: a\ndescription: "\\U00110000"', "bad_value"),
    ("name: a\ndescription: !!float abc", "bad_value"),
    ("name: a\ndescription: !!int " + "9" * 5000, "bad_value"),
    ("name: a\ndescription: " + "[" * 5000, "too_deep"),
    ("name: a\ndescription: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "too_deep"),
    ("name: a\n" + "x" * MAX_FRONTMATTER_CHARS, "too_large"),
    ("name: a\nname: b", "duplicate_key"),
    ("name: a\npermissions:\n  message:\n    child: allow\n    child: deny", "duplicate_key"),
    ("name: a\n? [1, 2]\n: x", "bad_key"),
    ("name: [", "yaml_syntax"),
])
def test_values_the_loader_chokes_on_are_typed_errors(frontmatter: str, problem: str) -> None:
    assert _refused(frontmatter).details["problem"] == problem


def test_a_date_is_read_as_the_text_it_is() -> None:
    doc = parse_agent_doc(_doc("name: a\ndescription: 2020-02-30"))
    assert doc.spec.description == "2020-02-30"


@pytest.mark.parametrize(("label", "hint"), [
    ("Child", "did you mean child?"),
    ("PARENT", "did you mean parent?"),
    ("siblings", "did you mean sibling?"),
    ("kids", "parent, child, sibling or *"),
    ("x*", "parent, child, sibling or *"),
])
def test_an_unknown_label_is_refused_with_a_hint(label: str, hint: str) -> None:
    error = _refused(f"name: a\npermissions:\n  message:\n    {label!r}: allow")
    assert error.details["problem"] == "unknown_label"
    assert hint in error.message
    assert error.details["field"] == f"permissions.message.{label}"


@pytest.mark.parametrize("label", ["child", "parent", "sibling", "*", "s*", "?hild", "[cp]*"])
def test_every_label_and_matching_pattern_is_accepted(label: str) -> None:
    doc = parse_agent_doc(_doc(f"name: a\npermissions:\n  message:\n    {label!r}: allow"))
    assert [rule.pattern for rule in doc.spec.rules.rules] == [label]


def test_a_control_character_is_a_syntax_error_not_a_raw_reader_error() -> None:
    # Found by the fuzz suite: the YAML reader refuses it while the loader is being built.
    assert _refused("name: a\x0c").details["problem"] == "yaml_syntax"


@pytest.mark.parametrize("value", ["!!timestamp nonsense", "!!timestamp 2020"])
def test_an_explicit_timestamp_that_is_no_date_is_a_bad_value(value: str) -> None:
    # Found by the deep fuzz run: the timestamp constructor raised AttributeError on text
    # its pattern does not match.
    assert _refused(f"name: a\ndescription: {value}").details["problem"] == "bad_value"
