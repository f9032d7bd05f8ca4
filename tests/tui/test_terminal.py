"""The demos on a real terminal (a pty): the progress bar and the rows share it without
tearing, and with stdout sent to a file the rows go there plain while the bar stays on the
terminal. The screen is what a terminal shows once the bytes are applied (a small emulator:
carriage returns, line erases and cursor-up are all rich's live display uses)."""

from __future__ import annotations

import os
import pty
import re
import sys
from pathlib import Path

from tests.daemon.conftest import DaemonProcess
from tests.tui.conftest import reaped
from treemail.adapters.ui.demo_connect import SCENES

_CONTROL = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\r|\n|[^\x1b\r\n]")
BAR = "━"  # what rich draws a bar with; no row has it
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def drawn(raw: str, label: str) -> bool:
    """Whether ``raw`` draws a bar labelled ``label`` at some point."""
    return f"{label} {BAR}" in _ANSI.sub("", raw)


def screen(raw: str) -> list[str]:
    """The lines a terminal shows after ``raw``, scrollback included."""
    lines: list[list[str]] = [[]]
    row = col = 0
    for token in _CONTROL.finditer(raw):
        text = token.group(0)
        if text == "\n":
            row, col = row + 1, 0
            lines.extend([] for _ in range(row + 1 - len(lines)))
        elif text == "\r":
            col = 0
        elif text.startswith("\x1b"):
            if token.group(2) == "K":  # erase: to the line's end, or the whole line
                lines[row] = lines[row][:col] if token.group(1) in ("", "0") else []
            elif token.group(2) == "A":
                row = max(0, row - int(token.group(1) or 1))
        else:
            line = lines[row]
            line.extend(" " for _ in range(col - len(line)))
            line[col:col + 1] = [text]
            col += 1
    return ["".join(line).rstrip() for line in lines]


def on_a_terminal(argv: list[str], cwd: Path, stdout: Path | None = None) -> tuple[int, str]:
    """Run ``treemail ARGV`` with a pty for its terminal (stdout to the file ``stdout`` if
    given): its exit status and all it wrote to the terminal."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: never returns
        os.chdir(cwd)
        os.environ.update(COLUMNS="150", LINES="40", TERM="xterm-256color")
        os.environ.pop("NO_COLOR", None)
        if stdout is not None:
            os.dup2(os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        os.execv(sys.executable, [sys.executable, "-m", "treemail", *argv])
    raw = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), raw.decode("utf-8", "replace")


def _assert_rows_clear_of_the_bar(raw: str, label: str) -> list[str]:
    assert drawn(raw, label)
    shown = screen(raw)
    torn = [line for line in shown if BAR in line]
    assert not torn, torn[:3]  # each row overwrote the bar's line, none was appended to it
    return shown


def test_the_embedded_demo_on_a_terminal(tmp_path: Path) -> None:
    code, raw = on_a_terminal(["demo"], tmp_path)
    assert code == 0, raw
    shown = _assert_rows_clear_of_the_bar(raw, "demo")
    assert any("session created (tree root)" in line for line in shown)
    assert shown.count("== Check") == 1 and any("each exactly once" in s for s in shown)


def test_the_connected_demo_on_a_terminal_and_to_a_file(tmp_path: Path) -> None:
    with reaped(DaemonProcess(tmp_path / ".treemail")) as daemon:
        code, raw = on_a_terminal(["demo", "--connect", "--approve"], tmp_path)
        assert code == 0, raw
        shown = _assert_rows_clear_of_the_bar(raw, "demo --connect")
        assert f"{SCENES}/{SCENES} Check" in _ANSI.sub("", raw)  # one step a scene
        assert any("session created (tree root)" in line for line in shown)
        assert any("each exactly once" in line for line in shown)
        # stdout to a file: there the rows and headings, plain; on the terminal the bar only.
        code, raw = on_a_terminal(["demo", "--connect", "--approve"], tmp_path,
                                  stdout=tmp_path / "out.txt")
        stopped, err = daemon.terminate()
    assert code == 0 and stopped == 0, (raw, err)
    out = (tmp_path / "out.txt").read_text()
    assert "\x1b[" not in out and "== Check" in out and "each exactly once" in out
    assert drawn(raw, "demo --connect") and "session created" not in raw
    assert not [line for line in screen(raw) if line.strip()]  # the bar left nothing behind
