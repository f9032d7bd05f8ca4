"""mypy refuses a misspelt lifecycle trigger, store counter or grant scope.

Each vocabulary is an enum (or a typed constructor) at its uses, so a typo is a type error,
not a string that quietly matches nothing. Every check pairs the misspelling with the correct
spelling, which mypy must accept: the failure is the typo's, not a broken snippet's.
"""

from __future__ import annotations

import pytest

from tests.unit.typecheck import mypy_errors

HEAD = "from typing import Any\nfrom treemail.core import delivery, keys, lifecycle, runs\n" \
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
