"""No lifecycle state or trigger is spelled as a bare string outside
``treemail/core/lifecycle.py``.

Every module names states through the state enums (``MessageState``, ``SessionState``,
``RunState``, ``RequestState``) and triggers through the trigger enums (``MessageTrigger``,
...), so mypy catches a misspelt one. This test walks the AST of every module of ``treemail/``
and fails on any string constant equal to a state's or a trigger's value. Docstrings are
sentences, never equal to a bare name, so they need no exemption.
"""

from __future__ import annotations

import ast
from pathlib import Path

from treemail.core.lifecycle import (
    ApprovalState,
    ApprovalTrigger,
    MessageState,
    MessageTrigger,
    RequestState,
    RequestTrigger,
    RunState,
    RunTrigger,
    SessionState,
    SessionTrigger,
)

PACKAGE = Path(__file__).resolve().parents[2] / "treemail"
DECLARATION = PACKAGE / "core" / "lifecycle.py"

STATE_NAMES = frozenset(
    str(s) for kind in (MessageState, SessionState, RunState, RequestState, ApprovalState)
    for s in kind
)
TRIGGER_NAMES = frozenset(
    str(t) for kind in (MessageTrigger, SessionTrigger, RunTrigger, RequestTrigger,
                        ApprovalTrigger)
    for t in kind
)

# (module, string) pairs that are genuinely not states or triggers, each with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    # Function names listed in ``__all__``: runs.start and runs.end step the lifecycles.
    ("core/runs.py", "start"): "the function runs.start, in __all__",
    ("core/runs.py", "end"): "the function runs.end, in __all__",
    ("core/receipts.py", "cancel"): "the function receipts.cancel, in __all__",
    # ``cancel`` is also the CLI command that cancels a session's run (not a message).
    ("adapters/ui/run_cmd.py", "cancel"): "the `treemail cancel` command, a run's cancel",
    # The model checker's actions are named after the engine methods they call.
    ("models/explore.py", "begin_request"): "the action calling Engine.begin_request",
    ("models/explore.py", "commit_request"): "the action calling Engine.commit_request",
    ("models/explore.py", "abort_request"): "the action calling Engine.abort_request",
    ("models/explore.py", "discard"): "the action calling Engine.discard",
    ("models/actions.py", "begin_request"): "the action calling Engine.begin_request",
    ("models/actions.py", "commit_request"): "the action calling Engine.commit_request",
    ("models/actions.py", "abort_request"): "the action calling Engine.abort_request",
    ("models/actions.py", "discard"): "the action calling Engine.discard",
    ("models/drain.py", "begin_request"): "the drain's step calling Engine.begin_request",
    ("models/drain.py", "commit_request"): "the drain's step calling Engine.commit_request",
    ("testing/postgres.py", "start"): "pg_ctl's start command",
    ("models/parallel.py", "start"): "the command that starts a checker worker's search",
    # ``approve`` is also approval.answer's wire parameter and the CLI command sending it.
    ("adapters/ui/commands.py", "approve"): "the approve command and approval.answer's param",
    ("adapters/ui/tui/sources.py", "approve"): "approval.answer's wire parameter",
    # ``deny`` is also a permission rule's action (Action.DENY).
    ("core/permissions.py", "deny"): "Action.DENY, a rule's action",
    ("models/explore.py", "deny"): "a rule's action, and the trace word of a denial",
    ("testing/store_sample.py", "deny"): "a rule's action in the contract's agent",
    ("models/world.py", "denied"): "the reference's PermissionDenied message text",
    # ``pending`` is also the pending-mail index and a message state's flag.
    ("core/keys.py", "pending"): "Table.PENDING and keys.pending, the pending-mail index",
    ("testing/store_sample.py", "pending"): "the pending-mail index in a store snapshot",
    ("testing/store_transactions.py", "pending"): "the pending-mail index in a store snapshot",
    ("spec_tables.py", "pending"): "a message state's pending flag",
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
        and node.value in STATE_NAMES | TRIGGER_NAMES
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


def test_the_check_sees_a_bare_trigger(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('step_message(tx, message, "consume")\n', encoding="utf-8")
    assert _bare_states(probe) == [(1, "consume")]
