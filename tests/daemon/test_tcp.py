"""The loopback TCP listener: a bearer token from a 0600 file, presented in ``initialize``;
no token, a wrong one, or any other first frame is refused and the connection closed; an
address off loopback is refused before anything is bound."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.host import open_daemon
from treemail.adapters.ui.cli import main


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class TcpDaemon(DaemonProcess):
    def __init__(self, data_dir: Path) -> None:
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        super().__init__(data_dir, "--tcp", f"127.0.0.1:{self.port}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the port is bound just after the socket
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise TimeoutError("the TCP listener did not come up")

    @property
    def token(self) -> str:
        return (self.data_dir / "daemon.token").read_text().strip()


@pytest.fixture(scope="module")
def tcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TcpDaemon]:
    process = TcpDaemon(tmp_path_factory.mktemp("tcp"))
    yield process
    code, err = process.terminate()
    assert code == 0, err
    assert process.token not in err  # the secret is never logged


async def _refused(address: str, frame: dict[str, object] | None,
                   token: str | None) -> tuple[RpcFailure, bool]:
    """What the daemon answers to a first frame, and whether it then closed the connection."""
    client = await DaemonClient.connect(address, initialize=False, token=token)
    try:
        with pytest.raises(RpcFailure) as caught:
            if frame is None:
                await client.initialize("intruder")
            else:
                await client.call(str(frame["method"]), {})
        with pytest.raises(ConnectionError):
            await client.call("session.list")
        return caught.value, True
    finally:
        await client.close()


def test_the_token_file_is_private_and_not_printed(tcp: TcpDaemon) -> None:
    path = tcp.data_dir / "daemon.token"
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert len(tcp.token) >= 40


@pytest.mark.parametrize(("frame", "token", "why"), [
    (None, None, "no auth_token"),
    (None, "not-the-token", "wrong auth_token"),
    ({"method": "session.list"}, None, "not initialize"),
])
def test_without_the_right_token_tcp_is_refused_and_closed(
    tcp: TcpDaemon, frame: dict[str, object] | None, token: str | None, why: str
) -> None:
    failure, closed = run(_refused(tcp.address, frame, token))
    assert failure.code == -32004 and failure.data_code == "rpc:unauthorized"
    assert why in failure.error.message and "daemon.token" in failure.error.message
    assert closed


def test_a_token_that_differs_in_one_character_is_refused(tcp: TcpDaemon) -> None:
    near = tcp.token[:-1] + ("A" if tcp.token[-1] != "A" else "B")
    failure, _ = run(_refused(tcp.address, None, near))
    assert failure.data_code == "rpc:unauthorized"


def test_with_the_token_tcp_serves_like_the_socket(tcp: TcpDaemon) -> None:
    async def go() -> tuple[dict[str, object], list[str]]:
        over_tcp = await DaemonClient.connect(tcp.address, token=tcp.token)
        local = await tcp.client()  # the Unix socket is still served, with no token
        try:
            made = await over_tcp.call("session.create", {"agent": "default"})
            listed = await local.call("session.list")
            return made, [s["session_id"] for s in listed["sessions"]]
        finally:
            await over_tcp.close()
            await local.close()

    made, seen = run(go())
    assert made["session_id"] in seen


def test_the_cli_connects_over_tcp_with_the_token_file(
    tcp: TcpDaemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TREEMAIL_TOKEN", raising=False)
    assert main(["sessions", "--connect", tcp.address, "--data-dir", str(tcp.data_dir)]) == 0
    assert "SESSION" in capsys.readouterr().out
    monkeypatch.setenv("TREEMAIL_TOKEN", "wrong")
    assert main(["sessions", "--connect", tcp.address, "--data-dir", str(tcp.data_dir)]) == 1
    err = capsys.readouterr().err
    assert "rpc:unauthorized" in err and "Traceback" not in err
    monkeypatch.delenv("TREEMAIL_TOKEN")
    missing = tcp.data_dir / "nowhere"
    assert main(["sessions", "--connect", tcp.address, "--token-file", str(missing)]) == 1
    assert "TREEMAIL_TOKEN" in capsys.readouterr().err


def _daemon(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(data_dir), *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "8.8.8.8", "name.invalid"])
def test_an_address_off_loopback_is_refused_before_anything_is_bound(
    tmp_path: Path, host: str
) -> None:
    spec = f"[{host}]:7" if ":" in host else f"{host}:7"
    done = _daemon(tmp_path / "data", "--tcp", spec)
    assert done.returncode == 2, done.stderr
    assert "daemon:not_loopback" in done.stderr and "Traceback" not in done.stderr
    assert "loopback" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before the data directory was made


def test_a_malformed_tcp_address_is_a_usage_error(tmp_path: Path) -> None:
    done = _daemon(tmp_path / "data", "--tcp", "localhost")
    assert done.returncode == 2 and "HOST:PORT" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "daemon.token").write_text("x" * 43 + "\n")
    (data / "daemon.token").chmod(0o644)
    done = _daemon(data, "--tcp", f"127.0.0.1:{_free_port()}")
    assert done.returncode == 2, done.stderr
    assert "daemon:token_unsafe" in done.stderr and "0644" in done.stderr


def test_a_port_in_use_is_a_clear_error_and_frees_the_data_dir(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _daemon(tmp_path / "data", "--tcp", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert "daemon:listen_failed" in done.stderr and "Traceback" not in done.stderr
    again = DaemonProcess(tmp_path / "data")  # the failed start released everything
    code, err = again.terminate()
    assert code == 0, err


def test_a_silent_tcp_peer_is_closed_after_the_auth_timeout(tmp_path: Path) -> None:
    async def go() -> tuple[bytes, float]:
        port = _free_port()
        daemon = await open_daemon(tmp_path / "data", tmp_path / "data" / "daemon.sock",
                                   Limits(auth_timeout=0.3), tcp=("127.0.0.1", port))
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = asyncio.get_running_loop().time()
            said = await reader.read()  # until the daemon closes it
            writer.close()
            return said, asyncio.get_running_loop().time() - started
        finally:
            daemon.request_stop()
            await daemon.stopped.wait()

    said, waited = run(go())
    assert b"rpc:unauthorized" in said and b"no initialize within 0.3s" in said
    assert waited < 10  # closed by the timeout, not by the test's end


def test_the_demo_runs_over_tcp(
    tcp: TcpDaemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREEMAIL_TOKEN", tcp.token)
    assert main(["demo", "--connect", tcp.address, "--approve"]) == 0
    assert "each exactly once" in capsys.readouterr().out


def test_a_second_daemon_is_told_the_first_ones_tcp_address(tcp: TcpDaemon) -> None:
    done = _daemon(tcp.data_dir)
    assert done.returncode == 2 and "daemon:data_dir_locked" in done.stderr
    assert f"pid {tcp.proc.pid}" in done.stderr and f"tcp 127.0.0.1:{tcp.port}" in done.stderr
