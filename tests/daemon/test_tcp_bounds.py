"""Before a TCP peer proves it holds the token it is a stranger: a few KiB, a few seconds, one
of a few places. Against a real daemon: a 1 MiB first frame is cut off at the byte budget,
connections past the cap are turned away while the daemon's memory stays bounded and its
clients are served, and running out of file descriptors costs a line of log, not a storm of
tracebacks, and service comes back once connections close."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import run
from tests.daemon.test_tcp import TcpDaemon
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.tcp import AUTH_BYTES, MAX_UNAUTHENTICATED
from treemail.protocol import types as t
from treemail.protocol.methods import SESSION_LIST
from treemail.protocol.rpc_errors import Overloaded


@pytest.fixture(scope="module")
def tcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TcpDaemon]:
    process = TcpDaemon(tmp_path_factory.mktemp("bounds"))
    yield process
    code, err = process.terminate()
    assert code == 0, err
    assert "Traceback" not in err


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the daemon says until it closes the connection (a reset counts as closed:
    it read what it wanted and dropped the rest)."""
    heard = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            heard += chunk
    return heard


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def _served(address: str, token: str) -> list[t.SessionView]:
    """An honest TCP client's session.list, once a place is free (a refusal for want of
    places, rpc:overloaded, is retried; anything else fails the test)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            client = await DaemonClient.connect(address, token=token)
        except RpcFailure as failure:
            if failure.data_code != Overloaded.code or (
                    asyncio.get_running_loop().time() > deadline):
                raise
            await asyncio.sleep(0.05)
            continue
        try:
            return (await client.request(SESSION_LIST, t.SessionListParams())).sessions
        finally:
            await client.close()


def test_a_1_mib_first_frame_is_cut_off_at_the_byte_budget(tcp: TcpDaemon) -> None:
    with _connect(tcp.port) as sock:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.sendall(b"x" * (1 << 20))  # one line, no newline, no handshake
        heard = _until_closed(sock)
    # Cut off for its bytes, not left to the handshake deadline.
    assert b"rpc:unauthorized" in heard
    assert f"more than {AUTH_BYTES} bytes before authentication".encode() in heard


def test_past_the_cap_connections_are_turned_away_and_clients_are_served(
    tcp: TcpDaemon
) -> None:
    async def go() -> tuple[bytes, list[t.SessionView], list[t.SessionView],
                            list[t.SessionView]]:
        honest = await DaemonClient.connect(tcp.address, token=tcp.token)  # before the flood
        local = await tcp.client()
        waiting = [_connect(tcp.port) for _ in range(MAX_UNAUTHENTICATED)]
        try:
            with _connect(tcp.port) as extra:
                turned_away = await asyncio.to_thread(_until_closed, extra)
            during = ((await honest.request(SESSION_LIST, t.SessionListParams())).sessions,
                      (await local.request(SESSION_LIST, t.SessionListParams())).sessions)
        finally:
            for sock in waiting:
                sock.close()
            await honest.close()
            await local.close()
        return turned_away, *during, await _served(tcp.address, tcp.token)

    turned_away, over_tcp, over_unix, after = run(go())
    assert b"rpc:overloaded" in turned_away
    assert f"{MAX_UNAUTHENTICATED} TCP connections are already waiting".encode() in turned_away
    assert over_tcp == over_unix == after


def test_a_flood_of_large_first_frames_keeps_the_daemon_small(tcp: TcpDaemon) -> None:
    """200 connections that each send 1 MiB without proving anything: before the bounds
    the daemon held every byte (+244 MiB); now each is cut off or turned away."""
    before = _peak_rss_kib(tcp.proc.pid)
    flood = []
    for _ in range(200):
        sock = _connect(tcp.port)
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(b"y" * (1 << 20))  # what the kernel takes now; the rest is never sent
        flood.append(sock)
    deadline = time.monotonic() + 60
    while flood and time.monotonic() < deadline:  # wait until the daemon closed them all
        readable, _, _ = select.select(flood, [], [], 1.0)
        for sock in readable:
            try:
                closed = not sock.recv(1 << 16)
            except OSError:
                closed = True
            if closed:
                flood.remove(sock)
                sock.close()
    assert not flood, f"{len(flood)} connections still open"
    grown_mib = (_peak_rss_kib(tcp.proc.pid) - before) / 1024
    assert grown_mib < 48, f"the daemon's peak RSS grew by {grown_mib:.0f} MiB"
    assert run(_served(tcp.address, tcp.token)) is not None


def test_out_of_file_descriptors_the_daemon_logs_once_and_serves_again(tmp_path: Path) -> None:
    def few_files() -> None:  # the daemon starts with about 12 descriptors open
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (24, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    daemon = TcpDaemon(tmp_path / "data", preexec_fn=few_files)
    assert daemon.proc.stderr is not None
    stderr = daemon.proc.stderr.fileno()
    os.set_blocking(stderr, False)
    heard: list[bytes] = []

    def said() -> bytes:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(stderr, 1 << 16):
                heard.append(chunk)
        return b"".join(heard)

    flood = [_connect(daemon.port) for _ in range(60)]
    try:
        deadline = time.monotonic() + 30
        while b"cannot accept connections" not in said():
            assert time.monotonic() < deadline, said().decode()
            select.select([stderr], [], [], 1.0)
        assert b"Too many open files" in said()
    finally:
        for sock in flood:
            sock.close()
    sessions = run(_served(daemon.address, daemon.token))  # accepting again
    before_stop = said().decode()
    os.set_blocking(stderr, True)
    code, rest = daemon.terminate()
    err = before_stop + rest
    assert code == 0 and sessions == []
    assert "Traceback" not in err
    assert err.count("cannot accept connections") <= 3, err
    assert len(err) < 4096, err
