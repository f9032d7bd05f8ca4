"""Every agent-doc refusal keeps the one code ``agent_doc:invalid`` and names its cause in a
stable ``problem`` detail from ``AGENT_DOC_PROBLEMS`` (the decision; spec/errors.json lists
the problems in the error's meaning). Before, only the YAML refusals carried a problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from treemail.adapters.runtime.agent_docs import load_agent_docs
from treemail.core.agents import parse_agent_doc
from treemail.core.errors import AGENT_DOC_PROBLEMS, AgentDocError

GOOD = "name: a\ndescription: d\n"


@pytest.mark.parametrize(("text", "problem"), [
    ("no frontmatter\n", "no_frontmatter"),
    ("---\nname: a\n", "unclosed_frontmatter"),
    ("---\n- a list\n---\n", "not_mapping"),
    ("---\nname: a\ncolour: red\n---\n", "unknown_field"),
    ("---\nname: a b\n---\n", "bad_name"),
    ("---\nname: ''\n---\n", "bad_text"),
    ("---\nname: a\ndescription: 3\n---\n", "bad_text"),
    ("---\nname: a\npermissions: [x]\n---\n", "bad_permissions"),
    ("---\nname: a\npermissions:\n  write: {}\n---\n", "unknown_action"),
    ("---\nname: a\npermissions:\n  message: [parent]\n---\n", "bad_rules"),
    ("---\nname: a\npermissions:\n  message:\n    1: allow\n---\n", "bad_label"),
    ("---\nname: a\npermissions:\n  message:\n    parent: maybe\n---\n", "bad_rule_action"),
    ("---\nname: a\npermissions:\n  message:\n    Child: allow\n---\n", "unknown_label"),
    ("---\nname: a\npermissions:\n  delegate:\n    b: ask\n---\n", "ask_not_allowed"),
])
def test_each_doc_problem_has_its_stable_name(text: str, problem: str) -> None:
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(text, source="a.md")
    assert caught.value.code == AgentDocError.code
    assert caught.value.details["problem"] == problem, caught.value.message


def test_directory_problems_have_their_stable_names(tmp_path: Path) -> None:
    def problem(directory: Path) -> object:
        with pytest.raises(AgentDocError) as caught:
            load_agent_docs(directory)
        return caught.value.details["problem"]

    assert problem(tmp_path / "missing") == "no_directory"
    (tmp_path / "one.md").write_text(f"---\n{GOOD}---\n")
    (tmp_path / "two.md").write_text(f"---\n{GOOD}---\n")
    assert problem(tmp_path) == "duplicate_name"
    (tmp_path / "two.md").write_bytes(b"---\nname: \xff\n---\n")
    assert problem(tmp_path) == "not_utf8"


def test_the_problems_are_listed_in_the_errors_meaning_and_enforced() -> None:
    doc = " ".join((AgentDocError.__doc__ or "").split())
    assert all(problem in doc for problem in AGENT_DOC_PROBLEMS)
    with pytest.raises(ValueError, match="AGENT_DOC_PROBLEMS"):
        AgentDocError("x", problem="made_up")
