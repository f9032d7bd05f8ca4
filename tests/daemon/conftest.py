"""A real daemon in a subprocess, reached by the real client over its Unix socket.

Most tests share one daemon (``daemon``, module scope); a test that stops, kills or
restarts one starts its own with ``DaemonProcess``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from treemail.adapters.daemon.client import DaemonClient
from treemail.core.lifecycle import SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import SESSION_LIST

T = TypeVar("T")


class DaemonProcess:
    def __init__(self, data_dir: Path, *extra: str, env: Mapping[str, str] | None = None,
                 umask: int | None = None, program: Sequence[str] = ("-m", "treemail"),
                 preexec_fn: Callable[[], object] | None = None) -> None:
        self.data_dir = data_dir
        named = extra[extra.index("--socket") + 1] if "--socket" in extra else None
        self.socket = Path(named) if named else data_dir / "daemon.sock"
        self.proc = subprocess.Popen(
            [sys.executable, *program, "daemon", "--data-dir", str(data_dir), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=None if env is None else {**os.environ, **env},
            umask=-1 if umask is None else umask, preexec_fn=preexec_fn)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {err}")
            if self.socket.exists() and _accepts(self.socket):  # not a stale file
                return
            time.sleep(0.02)
        raise TimeoutError(f"daemon not ready after {timeout}s")

    async def client(self, **capabilities: bool) -> DaemonClient:
        # token named: mypy would otherwise match the bool capabilities against it.
        return await DaemonClient.connect(self.socket, name="tests", token=None, **capabilities)

    def terminate(self, timeout: float = 20.0) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err.decode()

    def wait(self, timeout: float = 30.0) -> tuple[int, str]:
        """The exit of a daemon already told to stop (no second signal: it could land while
        the first one's handler is being removed at exit)."""
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err.decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.communicate(timeout=20)


def _accepts(path: Path) -> bool:
    import socket

    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


def served(data_dir: Path) -> Iterator[DaemonProcess]:
    """A fixture's daemon over ``data_dir``: started, yielded, and at the end stopped, which
    it must do cleanly (status 0)."""
    process = DaemonProcess(data_dir)
    yield process
    code, err = process.terminate()
    assert code == 0, err


def configured(data_dir: Path, config: str) -> DaemonProcess:
    """A daemon on a new private data directory whose ``config.toml`` is ``config``."""
    data_dir.mkdir(mode=0o700)
    (data_dir / "config.toml").write_text(config, encoding="utf-8")
    return DaemonProcess(data_dir)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from served(tmp_path_factory.mktemp("daemon"))


async def quiet(client: DaemonClient, timeout: float = 60.0) -> list[t.SessionView]:
    """Every session of the daemon, once none has a run queued or running: its feed has
    stopped growing. A message consumed is not a run finished (the model's answer and the
    run's end follow it), so a test that reads the feed's end waits for this first.
    ``timeout`` is a safety net against a hang, never the thing waited for."""
    async with asyncio.timeout(timeout):
        while True:
            sessions = await client.every(SESSION_LIST, t.SessionListParams())
            if all(s.state in (SessionState.IDLE, SessionState.FINISHED) for s in sessions):
                return sessions
            await asyncio.sleep(0.02)
