"""The README's TUI section stays true: the commands and flags it names exist, and the keys
it lists are the app's bindings, doing what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.binding import Binding, BindingType

from tests.unit.test_readme_daemon import _help, commands, spans
from treemail.adapters.ui.tui.app import TreemailTui
from treemail.adapters.ui.tui.approvals import Approvals

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Watching agents: `treemail tui`\n", 1)[1].split("\n## ", 1)[0]


def test_every_command_and_flag_it_names_exists(capsys: pytest.CaptureFixture[str]) -> None:
    named = commands(section())
    assert {words[0] for words in named} >= {"tui", "daemon", "demo", "tail", "replay", "log"}
    for words in named:
        shown = _help(capsys, words[0])
        for flag in (w for w in words[1:] if w.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", shown), f"treemail {words[0]} {flag}"
    alone = {s.split()[0] for s in spans(section()) if s.startswith("--")}
    assert alone >= {"--data-dir", "--connect", "--token-file"}
    for flag in alone:
        assert re.search(rf"{re.escape(flag)}\b", _help(capsys, "tui")), flag


def _bound(bindings: list[BindingType]) -> dict[str, str]:
    named = {"slash": "/", "question_mark": "?"}
    return {named.get(b.key, b.key): b.action for b in bindings if isinstance(b, Binding)}


def test_the_keys_it_lists_are_the_bindings() -> None:
    keys = re.findall(r"`(\w|/|\?)`\s+(approves|for|denies|searches|goes|to|lists|wraps|quits)",
                      section())
    listed = {key for key, _ in keys}
    assert listed == {"a", "s", "t", "d", "/", "n", "N", "?", "w", "q"}
    # The answers are the approvals pane's keys, not the app's: typed anywhere else they
    # answer nothing.
    answers, anywhere = _bound(Approvals.BINDINGS), _bound(TreemailTui.BINDINGS)
    assert set(answers) == {"a", "s", "t", "d"} and not set(answers) & set(anywhere)
    assert (answers["a"], answers["s"], answers["t"]) == (
        "app.answer('once')", "app.answer('session')", "app.answer('tree')")
    assert answers["d"] == "app.deny"
    assert (anywhere["/"], anywhere["n"], anywhere["N"], anywhere["?"], anywhere["w"],
            anywhere["q"]) == ("search", "next_match", "next_match(-1)", "help", "wrap", "quit")
