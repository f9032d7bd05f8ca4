"""One lock: the store's owner lock is the daemon's hold on its data directory. A second
daemon, a daemon against an embedded writer, and an embedded writer against a daemon are
each refused naming the holder's pid; a dead holder locks nobody out."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess
from treemail.adapters.daemon.errors import DataDirLocked
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import StoreLocked


def _daemon(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another program with the data directory's store open as its writer."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from treemail.adapters.store.lmdb_store import LmdbStore
        LmdbStore.open({str(tmp_path / "data" / "store")!r}, sync=False)
        print("ready", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    yield holder
    holder.kill()
    holder.wait()


def test_a_daemon_is_refused_a_store_an_embedded_writer_holds(
    tmp_path: Path, embedded: subprocess.Popen[str]
) -> None:
    done = _daemon(tmp_path / "data")
    assert done.returncode == 2, done.stderr
    assert DataDirLocked.code in done.stderr and "Traceback" not in done.stderr
    assert f"pid {embedded.pid}" in done.stderr and "embedded writer" in done.stderr
    assert not (tmp_path / "data" / "daemon.sock").exists()
    embedded.kill()
    embedded.wait()
    again = DaemonProcess(tmp_path / "data")  # the kernel dropped the dead writer's lock
    code, err = again.terminate()
    assert code == 0, err


def test_an_embedded_writer_is_refused_the_store_a_daemon_serves(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "data")
    try:
        with pytest.raises(StoreLocked) as caught:
            LmdbStore.open(tmp_path / "data" / "store")
        message = str(caught.value)
        assert f"pid {daemon.proc.pid}" in message and "treemail daemon" in message
        assert str(daemon.socket) in message
        assert caught.value.details["pid"] == str(daemon.proc.pid)
        # Readers take no lock: they work beside the daemon.
        LmdbStore.open(tmp_path / "data" / "store", readonly=True).close()
        # There is one lock: no other lock file in the data directory (beside the log).
        assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
            ".gitignore", "daemon.log", "daemon.sock", "store"]
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    LmdbStore.open(tmp_path / "data" / "store").close()  # a stopped daemon released it


def test_a_killed_daemon_locks_nobody_out_and_its_stale_socket_is_replaced(
    tmp_path: Path,
) -> None:
    first = DaemonProcess(tmp_path / "data")
    first.kill()
    assert first.socket.exists()  # left behind by kill -9
    second = DaemonProcess(tmp_path / "data")  # waits for a socket that accepts
    try:
        refused = _daemon(tmp_path / "data")  # a third one, while the second serves
        assert refused.returncode == 2
        assert f"pid {second.proc.pid}" in refused.stderr
        assert str(second.socket) in refused.stderr and "another daemon" in refused.stderr
        assert second.socket.exists()  # the refused daemon left the live socket alone
    finally:
        code, err = second.terminate()
    assert code == 0, err
