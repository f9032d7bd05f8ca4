"""The README's TUI section stays true: the commands and flags it names exist, and the keys
it lists are the app's bindings, doing what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.binding import Binding

from tests.unit.test_readme_daemon import _help, commands, spans
from treemail.adapters.ui.tui.app import TreemailTui

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


def test_the_keys_it_lists_are_the_bindings() -> None:
    keys = re.findall(r"`(\w|/)` (approves|for|denies|searches|goes|quits)", section())
    listed = {"/" if key == "/" else key for key, _ in keys}
    bound = {b.key if b.key != "slash" else "/": b.action
             for b in TreemailTui.BINDINGS if isinstance(b, Binding)}
    assert listed == {"a", "s", "t", "d", "/", "n", "q"}
    assert listed <= set(bound)
    assert (bound["a"], bound["s"], bound["t"]) == (
        "answer('once')", "answer('session')", "answer('tree')")
    assert bound["d"] == "deny" and bound["/"] == "search" and bound["q"] == "quit"
