"""``treemail demo --connect`` drives a demo through a running daemon."""

from __future__ import annotations

import pytest

from tests.daemon.conftest import DaemonProcess
from treemail.adapters.cli import main


def test_demo_connect_runs_through_the_daemon(
    daemon: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--connect", "--socket", str(daemon.socket)]) == 0
    out = capsys.readouterr().out
    assert "session created (tree root)" in out
    assert 'user mail (mode=steer): "Look at the tokenizer first."' in out
    assert "4 sessions" in out and "each exactly once" in out
