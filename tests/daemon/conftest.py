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

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.core import results
from treemail.core.errors import InvalidToolContext
from treemail.core.lifecycle import SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import RUN_SUBMIT, SESSION_GET, SESSION_LIST, TOOL_CALL

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


async def in_flight(client: DaemonClient, sid: str, *, fresh: bool = True,
                    timeout: float = 60.0) -> None:
    """Once the session has a run in flight: a run given to it first (``fresh``), or the one
    it has. Only the scripted model's delay holds a run in flight, so under load a run can
    be over before it is seen: a session seen with no run is given one again. ``timeout``
    is a safety net against a hang."""
    if fresh:
        await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="Start."))
    try:
        async with asyncio.timeout(timeout):
            while (state := (await client.request(SESSION_GET, t.SessionGetParams(
                    session_id=sid))).state) != SessionState.RUNNING:
                if state in (SessionState.IDLE, SessionState.FINISHED):
                    await client.request(RUN_SUBMIT, t.RunSubmitParams(
                        session_id=sid, text="Start."))
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"session {sid} had no run in flight within {timeout}s") from None


async def call_as_run(client: DaemonClient, sid: str, call_id: str,
                      arguments: dict[str, Any], *, name: str = "send_message",
                      fresh: bool = True) -> t.ToolCallResult:
    """Tool ``name`` called as the session's run in flight (``in_flight``). Under load the
    run seen can end before the call reaches it, which the daemon refuses with
    engine:invalid_tool_context, nothing done (before the call runs: a failure; while it
    runs: the tool's error result): then the session is given a run again and the call tried
    on that one."""
    for attempt in range(20):
        await in_flight(client, sid, fresh=fresh or attempt > 0)
        try:
            called = await client.request(TOOL_CALL, t.ToolCallParams(
                session_id=sid, tool_call_id=call_id, name=name, arguments=arguments))
        except RpcFailure as failure:
            if failure.data_code != InvalidToolContext.code:
                raise
            continue
        if results.read_text(called.content).get("error") != InvalidToolContext.code:
            return called
    raise AssertionError(f"no run of {sid} stayed in flight long enough for a tool call")
