"""``treemail demo --connect`` drives a demo through a running daemon; its lead's steer is
held under an ``ask`` rule, and the demo waits for the answer (or gives it, ``--approve``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess
from treemail.adapters.ui import demo_connect
from treemail.adapters.ui.cli import main

APPROVE = re.compile(r"run `treemail approve (\S+)`")


def test_demo_connect_runs_through_the_daemon(
    daemon: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--connect", "--socket", str(daemon.socket), "--approve"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "\x1b[" not in out  # off a terminal: plain rows, no progress bar
    assert "session created (tree root)" in out
    assert re.search(r"send_message to demo_explore_\w+ waits for your approval "
                     r"\(a child peer", out)
    assert "--approve: the demo answers it itself" in out
    assert "answered: approved (scope once)" in out
    assert 'user mail (mode=steer): "Look at the tokenizer first."' in out
    assert "4 sessions" in out and "each exactly once" in out


@pytest.mark.parametrize(("answer", "said", "typed"), [
    (["--scope", "session"], "approved (scope session): ", None),  # the whole approval id
    # The steer is never sent, and the tree still finishes; the approval is named by the
    # 8 characters the rows print.
    (["--deny"], "denied: ", 8),
])
def test_the_demo_waits_for_an_answer_given_elsewhere(
    daemon: DaemonProcess, answer: list[str], said: str, typed: int | None
) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "treemail", "demo", "--connect", "--socket", str(daemon.socket)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert demo.stdout is not None
        held = next(m[1] for line in demo.stdout if (m := APPROVE.search(line)))
        assert demo.poll() is None  # it waits: the tree cannot finish without the answer
        answered = subprocess.run(
            [sys.executable, "-m", "treemail", "approve", "--socket", str(daemon.socket),
             held[:typed], *answer], capture_output=True, text=True, timeout=60)
        assert answered.returncode == 0 and answered.stdout.startswith(said)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, err
    assert f"answered: {said}" in out and "each exactly once" in out


def test_nobody_answering_ends_the_demo_with_what_to_do(
    daemon: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--connect", "--socket", str(daemon.socket), "--wait", "0.3"]) == 1
    done = capsys.readouterr()
    [held] = APPROVE.findall(done.out)
    assert "the demo waits 0.3s for it" in done.out and "Check" not in done.out
    assert f"nobody answered approval {held} within 0.3s" in done.err
    assert f"`treemail approve {held}`" in done.err and "--approve" in done.err


@pytest.mark.parametrize("flags", [["--approve"], ["--wait", "5"]])
def test_the_connected_demos_flags_are_refused_without_connect(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["demo", "--path", str(tmp_path / "store"), *flags])
    assert done.value.code == 2
    assert "go with --connect" in capsys.readouterr().err


def test_a_model_slower_than_the_demo_waits_is_said_in_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A slow model (each scripted reply takes an hour here) outlasts how long the demo
    lets its tree run: the demo says so, with what to do, and exits 1."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.toml").write_text("[daemon.scripted]\ndelay = 3600\n", encoding="utf-8")
    slow = DaemonProcess(data)
    try:
        assert demo_connect.main(slow.socket, settle_for=0.5) == 1
    finally:
        code, err = slow.terminate()
    assert code == 0, err
    said = capsys.readouterr().err
    assert "Traceback" not in said and "TimeoutError" not in said
    assert "still running after 0.5s" in said and "treemail tail" in said
