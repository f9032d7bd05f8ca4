"""spec/ says what the code does: every generated table is re-derived and compared, and the
hand-written tables point only at names and tests that exist."""

from __future__ import annotations

import enum
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from treemail import spec_tables
from treemail.core import errors
from treemail.core.lifecycle import Lifecycle
from treemail.core.sending import GUARD_ORDER
from treemail.core.tools import schema_files

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"

JSON_TABLES = {
    "message_lifecycle.json": spec_tables.message_table,
    "session_lifecycle.json": spec_tables.session_table,
    "run_lifecycle.json": spec_tables.run_table,
    "approval_lifecycle.json": spec_tables.approval_table,
    "errors.json": spec_tables.errors_table,
    "events.json": spec_tables.events_table,
    "config.json": spec_tables.config_table,
    "guards.json": spec_tables.guards_table,
}

# The send_message codes the design names; each must exist whatever else changes.
CONTRACT_CODES = [
    f"send_message:{name}"
    for name in (
        "disabled", "invalid_arguments", "invalid_body", "unknown_session", "not_tree_peer",
        "self_send", "inbox_full", "max_hops_exceeded", "inflight_full", "engine_shutdown",
    )
]


def _load(name: str) -> Any:
    return json.loads((SPEC / name).read_text(encoding="utf-8"))


def _codes() -> list[str]:
    return [row["code"] for row in _load("errors.json")["errors"]]


@pytest.mark.parametrize("name", sorted(JSON_TABLES))
def test_json_table_equals_what_the_code_declares(name: str) -> None:
    assert _load(name) == JSON_TABLES[name](), f"regenerate: {spec_tables.REGENERATE}"


@pytest.mark.parametrize("name", sorted([*JSON_TABLES, "lifecycle.md", "config.md"]))
def test_generated_file_is_byte_for_byte_current(name: str) -> None:
    expected = spec_tables.generated_files()[name]
    assert (SPEC / name).read_text(encoding="utf-8") == expected, spec_tables.REGENERATE


def test_every_generated_file_is_checked() -> None:
    # The tool schemas are compared by tests/unit/test_tools.py, and by the --check run below.
    assert set(spec_tables.generated_files()) == {*JSON_TABLES, "lifecycle.md", "config.md",
                                                  *schema_files()}


def test_lifecycle_md_is_marked_generated_and_holds_every_diagram() -> None:
    text = (SPEC / "lifecycle.md").read_text(encoding="utf-8")
    assert text.startswith("<!-- GENERATED") and spec_tables.REGENERATE in text
    assert text.count("```mermaid\nstateDiagram-v2\n") == 5


def test_check_mode_reports_nothing_stale(capsys: pytest.CaptureFixture[str]) -> None:
    assert spec_tables.main(["--check", "--out", str(SPEC)]) == 0
    assert capsys.readouterr().out.strip() == "stale: none"


def test_main_writes_then_check_passes(tmp_path: Path) -> None:
    assert spec_tables.main(["--check", "--out", str(tmp_path)]) == 1
    assert spec_tables.main(["--out", str(tmp_path)]) == 0
    assert spec_tables.main(["--check", "--out", str(tmp_path)]) == 0


class _Toy(enum.StrEnum):
    A = "a"
    B = "b"
    C = "c"


class _ToyTrigger(enum.StrEnum):
    GO = "go"
    STOP = "stop"


def test_mermaid_renders_initial_transitions_and_finals() -> None:
    a, b, c = _Toy
    go, stop = _ToyTrigger
    toy = Lifecycle(
        name="Toy", initial=a, states=(a, b, c), final=frozenset({c}), triggers=(go, stop),
        meanings={go: "it goes", stop: "it stops"}, transitions={(a, go): b, (b, stop): c},
    )
    assert spec_tables.mermaid(toy) == (
        "stateDiagram-v2\n    [*] --> a\n    a --> b : go\n    b --> c : stop\n    c --> [*]\n"
    )


@pytest.mark.parametrize("source", ["spec", "code"])
def test_every_error_code_is_unique_and_namespaced(source: str) -> None:
    table = _load("errors.json") if source == "spec" else spec_tables.errors_table()
    codes = [row["code"] for row in table["errors"]]
    assert len(codes) == len(set(codes))
    for code in codes:
        assert re.fullmatch(r"[a-z_]+:[a-z][a-z0-9_]*", code), code


def test_errors_json_lists_every_exported_error_class() -> None:
    """The core's registry and every layer's errors module registered into it."""
    modules = [importlib.import_module(name) for name in errors.declaring_modules()]
    exported = {
        name for module in modules for name in module.__all__
        if isinstance(cls := getattr(module, name), type)
        and issubclass(cls, errors.TreemailError) and name != "TreemailError"
    }
    assert {row["class"] for row in _load("errors.json")["errors"]} == exported
    assert "ApprovalRequired" in exported


def test_every_contract_code_is_present() -> None:
    derived = {row["code"] for row in spec_tables.errors_table()["errors"]}
    assert set(CONTRACT_CODES) <= set(_codes()) & derived


def test_send_refusals_are_send_message_codes() -> None:
    for row in _load("errors.json")["errors"]:
        if row["base"] == "SendRefusal" and row["class"] != "UnknownSubagentReference":
            assert row["code"].startswith("send_message:"), row


def test_guards_json_follows_guard_order_and_known_codes() -> None:
    guards = _load("guards.json")
    assert [row["guard"] for row in guards["order"]] == list(GUARD_ORDER)
    known = set(_codes())
    for row in guards["order"] + guards["anytime"]:
        assert set(row["codes"]) <= known, row
    # Each guard named after a code raises exactly that code.
    for row in guards["order"] + guards["anytime"]:
        if f"send_message:{row['guard']}" in known:
            assert row["codes"] == [f"send_message:{row['guard']}"], row


def _known_names() -> set[str]:
    names = set(_codes()) | set(GUARD_ORDER)
    for table in ("message_lifecycle.json", "session_lifecycle.json"):
        machine = _load(table)
        names |= {s["name"] for s in machine["states"]} | set(machine["triggers"])
        names |= {t["log_kind"] for t in machine["transitions"]}
        names |= {s["log_kind"] for s in machine["states"] if "log_kind" in s}
    return names | {row["key"] for row in _load("config.json")["keys"]}


def _hand_written_is_canonical(name: str) -> Any:
    text = (SPEC / name).read_text(encoding="utf-8")
    table = json.loads(text)
    assert text == spec_tables.render_json(table), f"{name}: not in canonical json layout"
    return table


def test_invariants_have_stable_ids_and_mention_real_names() -> None:
    invariants = _hand_written_is_canonical("invariants.json")["invariants"]
    assert 8 <= len(invariants) <= 14
    ids = [inv["id"] for inv in invariants]
    assert ids == [f"INV{n}" for n in range(1, len(ids) + 1)]
    assert len({inv["name"] for inv in invariants}) == len(invariants)
    known = _known_names()
    for inv in invariants:
        assert inv["statement"].strip()
        assert set(inv["mentions"]) <= known, (inv["id"], set(inv["mentions"]) - known)


def _node_exists(node_id: str) -> bool:
    path, *names = node_id.split("::")
    if not path.startswith("tests/") or not path.endswith(".py") or not names:
        return False
    if not (ROOT / path).is_file():
        return False
    target: object = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    for name in names:
        target = getattr(target, name.split("[", 1)[0], None)
        if target is None:
            return False
    return callable(target) and names[-1].split("[", 1)[0].startswith("test")


def test_acceptance_criteria_point_at_existing_tests() -> None:
    criteria = _hand_written_is_canonical("acceptance.json")["criteria"]
    assert [c["id"] for c in criteria] == [f"AC{n}" for n in range(1, 10)]
    for criterion in criteria:
        assert criterion["criterion"].strip()
        covered, pending = criterion["covered_by"], criterion.get("pending")
        assert covered or pending, criterion["id"]
        if pending is not None:
            assert re.fullmatch(r"issue \d+: .+", pending), criterion["id"]
        missing = [node for node in covered if not _node_exists(node)]
        assert not missing, (criterion["id"], missing)


def test_node_id_checker_rejects_what_does_not_exist() -> None:
    assert _node_exists("tests/unit/test_spec.py::test_every_contract_code_is_present")
    assert _node_exists("tests/unit/test_spec.py::test_json_table_equals_what_the_code_declares"
                        "[errors.json]")
    assert not _node_exists("tests/unit/test_spec.py::test_no_such_test")
    assert not _node_exists("tests/unit/test_nowhere.py::test_x")
    assert not _node_exists("tests/unit/test_spec.py::CONTRACT_CODES")
