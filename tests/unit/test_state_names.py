"""No lifecycle state is spelled as a bare string outside ``treemail/core/lifecycle.py``.

Every module names states through the enums (``MessageState``, ``SessionState``, ``RunState``,
``RequestState``), so mypy catches a misspelt state. This test walks the AST of every module
of ``treemail/`` and fails on any string constant equal to a state's value. Docstrings are
sentences, never equal to a bare state name, so they need no exemption.
"""

from __future__ import annotations

import ast
from pathlib import Path

from treemail.core.lifecycle import MessageState, RequestState, RunState, SessionState

PACKAGE = Path(__file__).resolve().parents[2] / "treemail"
DECLARATION = PACKAGE / "core" / "lifecycle.py"

STATE_NAMES = frozenset(
    str(s) for kind in (MessageState, SessionState, RunState, RequestState) for s in kind
)

# (module, string) pairs that are genuinely not states, each with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    # RecipientState is the send result's wire vocabulary, fixed by the contract; two of its
    # values happen to equal session state names. It is declared once, here.
    ("core/records.py", "running"): "RecipientState.RUNNING, a wire value of the send result",
    ("core/records.py", "queued"): "RecipientState.QUEUED, a wire value of the send result",
}


def _bare_states(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and node.value in STATE_NAMES
    ]


def test_no_state_name_is_a_bare_string_outside_lifecycle() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DECLARATION:
            continue
        module = path.relative_to(PACKAGE).as_posix()
        found += [f"{module}:{line}: {value!r}" for line, value in _bare_states(path)
                  if (module, value) not in ALLOWED]
    assert found == [], "use the lifecycle enums instead:\n" + "\n".join(found)


def test_every_allowance_is_still_needed() -> None:
    """An allowance whose string is gone must be deleted, so the list stays precise."""
    for module, value in ALLOWED:
        assert value in {v for _, v in _bare_states(PACKAGE / module)}, (module, value)


def test_the_check_sees_a_bare_state(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('if session.state == "finished":\n    pass\n', encoding="utf-8")
    assert _bare_states(probe) == [(1, "finished")]
