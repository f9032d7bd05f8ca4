"""``treemail tail`` when its daemon goes away: it ends with status 1 and says so on stderr,
whether the daemon was stopped or killed, and never waits on a connection that is gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess

STEP = 60  # seconds any one step may take, however loaded the machine


@pytest.mark.parametrize("end", ["stopped", "killed"])
def test_tail_ends_saying_the_daemon_went_away(tmp_path: Path, end: str) -> None:
    daemon = DaemonProcess(tmp_path / "data")
    tail = subprocess.Popen(
        [sys.executable, "-m", "treemail", "tail", "--data-dir", str(daemon.data_dir)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert tail.stderr is not None
        assert "following the feed after #0" in tail.stderr.readline()  # now it waits
        make = subprocess.run(
            [sys.executable, "-m", "treemail", "steer", "--data-dir", str(daemon.data_dir),
             "nobody", "hi"], capture_output=True, text=True, timeout=STEP)
        assert make.returncode == 1  # a client came and went; tail still follows
        assert tail.poll() is None
        if end == "killed":
            daemon.kill()
        else:
            code, err = daemon.terminate()
            assert code == 0, err
        out, err = tail.communicate(timeout=STEP)
    finally:
        for process in (tail, daemon.proc):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=STEP)
    assert tail.returncode == 1, err
    assert "treemail tail: the daemon closed the connection after #0" in err
    assert "start it again with `treemail daemon`" in err and "Traceback" not in err
    assert out == ""
