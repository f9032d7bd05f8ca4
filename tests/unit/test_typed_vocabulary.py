"""mypy refuses a misspelt lifecycle trigger, store counter or grant scope.

Each vocabulary is an enum (or a typed constructor) at its uses, so a typo is a type error,
not a string that quietly matches nothing. Every check pairs the misspelling with the correct
spelling, which mypy must accept: the failure is the typo's, not a broken snippet's.
The store port still takes any text as a counter name (backends and their tests name their
own), so an AST check keeps the counter kinds' names out of every module but ``keys``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.typecheck import mypy_errors
from treemail.core import keys

PACKAGE = Path(__file__).resolve().parents[2] / "treemail"

HEAD = "from typing import Any\nfrom treemail.core import keys, lifecycle, runs\n" \
       "from treemail.core.lifecycle import MESSAGE, MessageState, MessageTrigger\n"

SNIPPETS = {
    "trigger_ok": HEAD + "MESSAGE.step('m', MessageState.ACCEPTED, MessageTrigger.ADMIT)\n",
    # A plain string, even the right one, is not a trigger.
    "trigger_string": HEAD + "MESSAGE.step('m', MessageState.ACCEPTED, 'admit')\n",
    "trigger_typo": HEAD + "MESSAGE.step('m', MessageState.ACCEPTED, MessageTrigger.ADMITT)\n",
    # A trigger of another machine.
    "trigger_machine": HEAD + "MESSAGE.step('m', MessageState.ACCEPTED, "
                              "lifecycle.RunTrigger.START)\n",
    "end_ok": HEAD + "def f(tx: Any) -> None:\n"
                     "    runs.end(tx, tx, 's', 'r', lifecycle.RunTrigger.FINISH, 'done')\n",
    "end_string": HEAD + "def f(tx: Any) -> None:\n"
                         "    runs.end(tx, tx, 's', 'r', 'finish', 'done')\n",
}


@pytest.fixture(scope="module")
def errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return mypy_errors(tmp_path_factory.mktemp("typed"), SNIPPETS)


def test_correct_spellings_type_check(errors: dict[str, list[str]]) -> None:
    assert {name: found for name, found in errors.items() if name.endswith("_ok")} == {
        name: [] for name in SNIPPETS if name.endswith("_ok")}


@pytest.mark.parametrize(("snippet", "expected"), [
    ("trigger_string", 'incompatible type "str"; expected "MessageTrigger"'),
    ("trigger_typo", '"type[MessageTrigger]" has no attribute "ADMITT"'),
    ("trigger_machine", 'incompatible type "RunTrigger"; expected "MessageTrigger"'),
    ("end_string", 'incompatible type "str"; expected "RunTrigger"'),
])
def test_a_misspelling_is_a_type_error(
    errors: dict[str, list[str]], snippet: str, expected: str
) -> None:
    assert any(expected in line for line in errors[snippet]), errors[snippet]


COUNTER_SNIPPETS = {
    "counter_ok": HEAD + "def f(tx: Any) -> None:\n"
                         "    tx.add(keys.pair_counter('a', 'b'), 1)\n"
                         "    keys.counter_kind('x') is keys.Counter.INBOX\n",
    "counter_typo": HEAD + "keys.Counter.INBX\n",
    "counter_maker_typo": HEAD + "keys.inbox_countr('a')\n",
    # A grant names its scope by the enum: a plain or misspelt scope is refused.
    "scope_ok": HEAD + "from treemail.core.records import GrantScope\n"
                       "keys.grant_counter(GrantScope.TREE, 's', 'op', 'peer')\n",
    "scope_string": HEAD + "keys.grant_counter('tree', 's', 'op', 'peer')\n",
    "scope_typo": HEAD + "from treemail.core.records import GrantScope\n"
                         "keys.grant_counter(GrantScope.TRE, 's', 'op', 'peer')\n",
}
SNIPPETS.update(COUNTER_SNIPPETS)


@pytest.mark.parametrize(("snippet", "expected"), [
    ("counter_typo", '"type[Counter]" has no attribute "INBX"'),
    ("counter_maker_typo", 'has no attribute "inbox_countr"'),
    ("scope_string", 'incompatible type "str"; expected "GrantScope"'),
    ("scope_typo", '"type[GrantScope]" has no attribute "TRE"'),
])
def test_a_misspelt_counter_or_scope_is_a_type_error(
    errors: dict[str, list[str]], snippet: str, expected: str
) -> None:
    assert any(expected in line for line in errors[snippet]), errors[snippet]


def _spelt_counters(path: Path) -> list[tuple[int, str]]:
    """String constants (f-strings' literal heads included) that begin a counter's name."""
    heads = tuple(f"{kind.value}/" for kind in keys.Counter)
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text("utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.startswith(heads)]


def test_counter_names_are_built_only_in_keys() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
             for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "core" / "keys.py"
             for line, value in _spelt_counters(path)]
    assert found == [], "build counter names with treemail.core.keys:\n" + "\n".join(found)


def test_the_counter_check_sees_a_spelt_name(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('tx.add(f"inbox/{recipient}", 1)\n', encoding="utf-8")
    assert _spelt_counters(probe) == [(1, "inbox/")]
