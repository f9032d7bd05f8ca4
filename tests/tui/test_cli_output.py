"""The CLI's two forms: rich on a terminal, plain and stable anywhere else. Scripts read the
plain form, so it is asserted exactly; the terminal form must carry the same text."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from treemail.adapters.ui.cli import main
from treemail.adapters.ui.console import ProgressLine, console, print_row, print_table
from treemail.adapters.ui.transcript import Row, Tone
from treemail.core.lifecycle import MessageState, SessionState

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ROW = Row("mail:m1", "s1", 7, "lead_1234abcd", Tone.MAIL,
          'consumed  user mail (mode=steer): "Look at the tokenizer first."', MessageState.CONSUMED)


def test_a_table_off_a_terminal_is_plain_aligned_columns() -> None:
    out = io.StringIO()
    print_table(("SESSION", "STATE"),
                [("s-1", SessionState.RUNNING), ("session-22", SessionState.IDLE)], out)
    assert out.getvalue() == ("SESSION     STATE\n"
                              "s-1         running\n"
                              "session-22  idle\n")


def test_a_table_on_a_terminal_is_rich_with_the_same_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    out = io.StringIO()
    print_table(("SESSION", "STATE"), [("s-1", SessionState.RUNNING)], out)
    assert "\x1b[" in out.getvalue()
    assert [line.split() for line in ANSI.sub("", out.getvalue()).splitlines()] == [
        ["SESSION", "STATE"], ["s-1", SessionState.RUNNING]]


def test_a_table_on_a_narrow_terminal_keeps_whole_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "40")
    uuid = "06c81374-a346-4932-b888-60df38a80eff"
    out = io.StringIO()
    print_table(("SESSION", "HANDLE", "PARENT"), [(uuid, "demo_lead_06c81374", uuid)], out)
    assert ANSI.sub("", out.getvalue()).splitlines()[1].split() == [
        uuid, "demo_lead_06c81374", uuid]


def test_a_row_off_a_terminal_is_its_plain_line() -> None:
    out = io.StringIO()
    print_row(ROW, console(out))
    assert out.getvalue() == ROW.line() + "\n"


def test_a_row_on_a_terminal_is_coloured_and_strips_to_its_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "160")
    out = io.StringIO()
    print_row(ROW, console(out))
    assert "\x1b[" in out.getvalue() and ANSI.sub("", out.getvalue()) == ROW.line() + "\n"


def test_progress_off_a_terminal_prints_only_its_final_line() -> None:
    out = io.StringIO()
    progress = ProgressLine(out, "check")
    progress.write("\r  states       10  12/s ")
    progress.write("\r  states       55  846/s \n")
    assert out.getvalue() == "  states       55  846/s \n"


def test_tui_without_a_daemon_or_a_store_says_what_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tui", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no daemon answers at" in err and "treemail daemon --data-dir" in err
