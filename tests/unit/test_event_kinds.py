"""No event kind is spelled as a bare string outside ``treemail/core/event_kinds.py``: writers and
readers name kinds through ``EventKind`` and the payload classes, so mypy sees a misspelt one."""

from __future__ import annotations

import ast
from pathlib import Path

from treemail.core.events import EventKind

PACKAGE = Path(__file__).resolve().parents[2] / "treemail"
DECLARATION = PACKAGE / "core" / "event_kinds.py"
KINDS = {kind.value for kind in EventKind}
# The prefix shared by the message kinds, which a reader could match on instead of a kind.
PREFIXES = ("ProducerMessage",)


def _bare(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    # A module's ``__all__`` names its payload classes, which share their kinds' spelling.
    exported = {id(item) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                for item in ast.walk(node.value)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in exported):
            text = node.value
            if text in KINDS or text in PREFIXES:
                found.append((node.lineno, text))
    return found


def test_no_event_kind_is_a_bare_string_outside_event_kinds_py() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != DECLARATION and (hits := _bare(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "name kinds through treemail.core.events, not as strings"


def test_the_check_finds_a_bare_kind_and_a_prefix() -> None:
    source = 'if event.kind == "ModelOutput" or k.startswith("ProducerMessage"): pass\n'
    assert _bare(source) == [(1, "ModelOutput"), (1, "ProducerMessage")]
    assert _bare('__all__ = ["ModelOutput"]\n') == []
    assert _bare('label = "model output"\n') == []
