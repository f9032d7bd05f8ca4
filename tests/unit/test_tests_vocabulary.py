"""The tests name treemail's vocabulary through its types: a state by its enum, an event kind by
``EventKind``, an error code by its class's ``code``, a wire method by its constant in
``treemail.protocol.methods`` (``SESSION_CREATE.name`` where a raw name is needed), so that a
rename reaches every test and mypy refuses a misspelling, as ``test_state_names`` holds the
package to.

This walks the AST of every module of ``tests/`` and fails on a string constant equal to a
lifecycle or recipient state, an event kind, a registered error code or a method's wire name.
Left alone: docstrings (sentences, never a bare name), and dict literals' keys (a JSON object's
or a table's field names, which only happen to equal a state: ``{"pending": 3}``), except a
method's name, which has a dot or a slash and no other meaning (``{"session.get": 1}`` is a
table by method). A test that checks the wire's or a document's literal spelling keeps its
literals, allowed below with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from treemail import spec_tables
from treemail.core.events import EventKind
from treemail.core.lifecycle import (
    ApprovalState,
    MessageState,
    RequestState,
    RunState,
    SessionState,
)
from treemail.core.records import RecipientState
from treemail.protocol.methods import METHODS, NOTIFICATIONS, SERVER_REQUESTS

TESTS = Path(__file__).resolve().parents[1]

VOCABULARY = frozenset(
    {str(s) for kind in (MessageState, SessionState, RunState, RequestState, ApprovalState,
                         RecipientState) for s in kind}
    | {str(k) for k in EventKind}
    | {cls.code for cls in spec_tables._error_classes()})

# Every method, notification and server request by its wire name, keys of a dict included.
METHOD_NAMES = frozenset({*METHODS, *NOTIFICATIONS, *SERVER_REQUESTS})

# Modules whose literals are the point: each checks a spelling as written outside the code.
ALLOWED_FILES: dict[str, str] = {
    "unit/test_bindings.py": "checks the schema bundle's and TypeScript's literal enums, kinds, "
                             "codes and method names, as a client reads them",
    "unit/test_error_registry.py": "probes the registry's scan with codes spelt by hand, and "
                                   "checks tool results' literal JSON",
    "unit/test_event_kinds.py": "probes the event-kind scan with kinds spelt by hand",
    "unit/test_state_names.py": "probes the state-name scan, and allows package literals by "
                                "their spelling",
    "unit/test_typed_vocabulary.py": "mypy snippets: the plain string is the misspelling",
    "unit/test_forward_values.py": "frames of a later daemon, as raw JSON on the wire",
    "unit/test_tests_vocabulary.py": "this check's own probes",
}

# (module, string) pairs that are not the vocabulary where they stand, each with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    ("daemon/test_scenario.py", "finished"): "the label of the scenario's step, in r",
    ("daemon/test_scenario.py", "queued"): "the label of the scenario's step, in r",
    ("tui/test_live_equals_replay.py", "queued"): "the label of a message the test sent",
    ("unit/operations.py", "denied"): "a case's label, and a mail body's text",
    ("unit/operations.py", "pending"): "Engine.pending, the read a case names",
    ("unit/test_checksum_reads.py", "pending"): "the store's pending read, by name",
    ("unit/test_one_transaction.py", "pending"): "the store's pending read, by name",
    ("unit/test_spec.py", "pending"): "a done-when criterion's field",
    ("unit/test_store_reads.py", "pending"): "a mail body's text",
    ("unit/test_lifecycle.py", "accepted"): "a plain string as decoded, proving the tables "
                                            "take one",
    ("property/test_differential.py", "shutdown"): "a rule's kind of stop, in the model, "
                                                   "not the wire method",
    ("unit/operations.py", "shutdown"): "Engine.shutdown, the operation a case names",
    ("unit/test_one_transaction.py", "shutdown"): "Engine.shutdown, the operation a case names",
}


def _bare(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    keys = {id(key) for node in ast.walk(tree) if isinstance(node, ast.Dict)
            for key in node.keys if key is not None}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skipped
            and (node.value in METHOD_NAMES
                 or (node.value in VOCABULARY and id(node) not in keys))]


def test_tests_name_the_vocabulary_through_its_types() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        module = path.relative_to(TESTS).as_posix()
        if module in ALLOWED_FILES:
            continue
        found += [f"{module}:{line}: {value!r}" for line, value in _bare(path)
                  if (module, value) not in ALLOWED]
    assert found == [], ("name these through MessageState/SessionState/..., EventKind, the "
                         "error class's .code, or the method's constant (SESSION_CREATE.name):\n"
                         + "\n".join(found))


def test_every_allowance_is_still_needed() -> None:
    """An allowance whose string or module is gone must be deleted, so the lists stay exact."""
    for module in ALLOWED_FILES:
        assert (TESTS / module).exists(), module
    for module, value in ALLOWED:
        assert value in {v for _, v in _bare(TESTS / module)}, (module, value)


def test_the_check_sees_a_state_a_kind_a_code_and_a_method(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('"""consumed"""\n'
                     'assert m.state == "claimed" and {"pending": 1}\n'
                     'assert kind == "RunStarted" and error.code == "engine:unknown_target"\n'
                     'call_raw("session.create", {}) and {"events/event": 1}\n',
                     encoding="utf-8")
    assert sorted(_bare(probe)) == [(2, "claimed"), (3, "RunStarted"),
                                    (3, "engine:unknown_target"), (4, "events/event"),
                                    (4, "session.create")]
