"""(j) What one peer costs the daemon: a one-message run with 1,000 idle subscriptions
against the same run with none, and the daemon's peak RSS while it answers 60 pipelined
``message.list`` of a 6 MiB session against its RSS just before (a real daemon subprocess)."""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.lines import Line
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.daemon.host import open_daemon
from treemail.protocol import types as t
from treemail.protocol.methods import (
    EVENTS_EVENT,
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    EVENTS_UNSUBSCRIBE,
    INITIALIZE,
    MESSAGE_LIST,
    PROTOCOL_VERSION,
    SESSION_CREATE,
)

__all__ = ["PIPELINED", "bounds_lines", "pipelined_lists", "vm"]

IDLE = 1000
RUNS = 9
PIPELINED = 60
DEFAULT_AGENT = t.SessionCreateParams(agent="default")


def bounds_lines(root: Path) -> list[Line]:
    quiet, idle = asyncio.run(_run_times(root / "subs"))
    before, peak = asyncio.run(_pipelined(root / "rss"))
    return [
        Line("j_idle", f"(j) one-message run, {IDLE:,} idle subscriptions", idle * 1e3,
             quiet * 1e3, "ms", "the same run, no subscription", "<= 2x", idle <= 2 * quiet),
        Line("j_rss", f"(j) peak RSS, {PIPELINED} pipelined lists of a 6 MiB session", peak / 2**20,
             before / 2**20, "MiB", "the daemon's RSS before them", "<= 3x",
             peak <= 3 * before),
    ]


async def _one_run(client: DaemonClient, sid: str) -> float:
    head = (await client.request(EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
    sub = await client.request(EVENTS_SUBSCRIBE,
                               t.EventsSubscribeParams(after=head, session_id=sid))
    start = time.perf_counter()
    await client.submit(sid, "one message")
    while (await client.next_notification(EVENTS_EVENT)).event.kind != "RunFinished":
        pass
    took = time.perf_counter() - start
    await client.request(EVENTS_UNSUBSCRIBE,
                         t.EventsUnsubscribeParams(subscription_id=sub.subscription_id))
    return took


async def _run_times(data: Path) -> tuple[float, float]:
    daemon = await open_daemon(data, data / "daemon.sock")
    try:
        user = await DaemonClient.connect(data / "daemon.sock", name="bench")
        idler = await DaemonClient.connect(data / "daemon.sock", name="idle")
        idle, busy = [(await user.request(SESSION_CREATE, DEFAULT_AGENT)).session_id
                      for _ in range(2)]
        quiet = statistics.median([await _one_run(user, busy) for _ in range(RUNS)])
        for _ in range(IDLE // 50):  # under the in-flight cap
            await idler.request_many(
                EVENTS_SUBSCRIBE, [t.EventsSubscribeParams(after=0, session_id=idle)] * 50)
        loaded = statistics.median([await _one_run(user, busy) for _ in range(RUNS)])
        await idler.close()
        await user.close()
        return quiet, loaded
    finally:
        daemon.request_stop()
        await daemon.stopped.wait()


def vm(pid: int, key: str) -> int:
    """A ``VmRSS``/``VmHWM``-style line of ``/proc/PID/status``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


async def pipelined_lists(socket: Path, pid: int) -> tuple[int, int, list[dict[str, Any]]]:
    """Against the daemon ``pid`` serving ``socket``: a session of 24 plugin mails of about
    256 KB, then ``PIPELINED`` ``message.list`` of it written at once. The daemon's RSS
    before, its peak (VmHWM, reset first) and every answer, in the order they came
    (``tests/daemon/test_bounds.py`` asserts on the same run)."""
    user = await DaemonClient.connect(socket, name="pipelined")
    sid = (await user.request(SESSION_CREATE, DEFAULT_AGENT)).session_id
    for i in range(24):
        await user.producer_send(sid, f"{i} " + "x" * (256 * 1000))
    await user.close()
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM
    before = vm(pid, "VmRSS")
    reader, writer = await asyncio.open_unix_connection(str(socket), limit=64 << 20)
    frames = [{"id": 0, "method": INITIALIZE.name, "params": {
        "protocol_version": PROTOCOL_VERSION, "client_info": {"name": "pipelined"}}}]
    frames += [{"id": i, "method": MESSAGE_LIST.name, "params": {"session_id": sid}}
               for i in range(1, PIPELINED + 1)]
    writer.write(b"".join(json.dumps({"jsonrpc": "2.0", **f}).encode() + b"\n"
                          for f in frames))
    answers = [json.loads(await reader.readline()) for _ in frames]
    writer.close()
    return before, vm(pid, "VmHWM"), answers


async def _pipelined(data: Path) -> tuple[int, int]:
    data.mkdir(parents=True)
    (data / "config.toml").write_text('[daemon]\nmodel = "echo"\n')
    socket = data / "daemon.sock"
    proc = subprocess.Popen([sys.executable, "-m", "treemail", "daemon", "--data-dir",
                             str(data)], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not socket.exists():
            await asyncio.sleep(0.02)
        before, peak, _ = await pipelined_lists(socket, proc.pid)
        return before, peak
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
