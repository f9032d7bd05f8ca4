"""``--socket PATH`` names a path the daemon takes only if it is free or a stale socket: a
file is refused and left alone, a socket another daemon serves is refused, and a daemon
unlinks at the end only the socket it bound, never what has taken its place."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.errors import SocketInUse, SocketPathTaken
from treemail.protocol import types as t
from treemail.protocol.methods import SESSION_LIST


def _daemon(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(data_dir), *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_a_path_that_is_not_a_socket_is_refused_and_left_intact(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    done = _daemon(tmp_path / "data", "--socket", str(notes))
    assert done.returncode == 2, done.stderr
    assert SocketPathTaken.code in done.stderr and str(notes) in done.stderr
    assert "Traceback" not in done.stderr
    assert notes.read_text() == "my notes\n"
    assert not (tmp_path / "data").exists()  # refused before the data directory was made


def test_a_socket_another_daemon_serves_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "shared.sock"
    first = DaemonProcess(tmp_path / "first", "--socket", str(path))
    try:
        inode = path.stat().st_ino
        done = _daemon(tmp_path / "second", "--socket", str(path))
        assert done.returncode == 2, done.stderr
        assert SocketInUse.code in done.stderr and str(path) in done.stderr
        assert "Traceback" not in done.stderr
        assert path.stat().st_ino == inode  # the first one's socket, still in place

        async def served() -> t.SessionListResult:
            client = await first.client()
            try:
                return await client.request(SESSION_LIST, t.SessionListParams())
            finally:
                await client.close()

        assert run(served()) == t.SessionListResult(sessions=[], next=None)
    finally:
        code, err = first.terminate()
    assert code == 0, err
    assert not path.exists()  # the first one took its own socket away


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as dead:  # bound, never listening: nothing answers
        dead.bind(str(path))
    daemon = DaemonProcess(tmp_path / "data", "--socket", str(path))
    code, err = daemon.terminate()
    assert code == 0, err


def test_a_daemon_does_not_unlink_a_socket_that_replaced_its_own(tmp_path: Path) -> None:
    path = tmp_path / "daemon.sock"
    daemon = DaemonProcess(tmp_path / "data", "--socket", str(path))
    os.rename(path, tmp_path / "moved.sock")  # someone moved it away, and bound another there
    with socket.socket(socket.AF_UNIX) as replacement:
        replacement.bind(str(path))
        replacement.listen()
        inode = path.stat().st_ino
        code, err = daemon.terminate()
        assert code == 0, err
        assert path.exists() and path.stat().st_ino == inode
