"""The loopback TCP listener: a token in a 0600 file that never crosses the wire. Both sides
prove they hold it (HMAC over both sides' nonces, the server first); a wrong proof, an old
client that sends the token in clear, or any other first frame is refused and the connection
closed; an address off loopback is refused before anything is bound."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.errors import (
    DataDirLocked,
    ListenFailed,
    NotLoopback,
    ServerUnproven,
    TokenFileUnsafe,
)
from treemail.adapters.daemon.host import open_daemon
from treemail.adapters.daemon.tcp import Token
from treemail.adapters.ui.cli import main
from treemail.core.errors import InvalidRequest
from treemail.protocol import types as t
from treemail.protocol.methods import (
    AUTH_CHALLENGE,
    AUTH_PROVE,
    INITIALIZE,
    SESSION_CREATE,
    SESSION_LIST,
)
from treemail.protocol.rpc_errors import ClearToken, Unauthorized


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class TcpDaemon(DaemonProcess):
    def __init__(self, data_dir: Path, *extra: str,
                 preexec_fn: Callable[[], object] | None = None) -> None:
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        super().__init__(data_dir, "--tcp", f"127.0.0.1:{self.port}", *extra,
                         preexec_fn=preexec_fn)
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


async def _first_frames(address: str, *frames: dict[str, Any]) -> tuple[list[Any], bool]:
    """What the daemon answers to the first requests of a TCP connection, in order (a result,
    or the ``RpcFailure``), and whether it then closed the connection."""
    client = await DaemonClient.connect(address, initialize=False, authenticate=False)
    try:
        answers: list[Any] = []
        for frame in frames:
            try:
                # Raw: the frames are a handshake's, right or wrong on purpose.
                answers.append(await client.call_raw(str(frame["method"]), frame["params"]))
            except RpcFailure as failure:
                answers.append(failure)
            except ConnectionError as gone:
                answers.append(gone)
        try:
            await client.request(SESSION_LIST, t.SessionListParams())
        except ConnectionError:
            return answers, True
        return answers, False
    finally:
        await client.close()


def _challenge(nonce: bytes) -> dict[str, Any]:
    return {"method": AUTH_CHALLENGE.name, "params": {"client_nonce": nonce.hex()}}


def _prove(proof: bytes) -> dict[str, Any]:
    return {"method": AUTH_PROVE.name, "params": {"client_proof": proof.hex()}}


def test_the_token_file_is_private_and_not_printed(tcp: TcpDaemon) -> None:
    path = tcp.data_dir / "daemon.token"
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert len(tcp.token) >= 40


def test_the_daemon_proves_it_holds_the_token_and_admits_a_right_proof(tcp: TcpDaemon) -> None:
    token, nonce = Token(tcp.token), secrets.token_bytes(32)

    async def go() -> tuple[list[Any], bool]:
        client = await DaemonClient.connect(tcp.address, initialize=False, authenticate=False)
        try:
            answer = await client.request(
                AUTH_CHALLENGE, t.AuthChallengeParams(client_nonce=nonce.hex()))
            server_nonce = bytes.fromhex(answer.server_nonce)
            proof = token.client_proof(server_nonce, nonce)
            proved = await client.request(AUTH_PROVE, t.AuthProveParams(client_proof=proof.hex()))
            return [answer, proved, await client.initialize("tests")], True
        finally:
            await client.close()

    (answer, proved, initialized), _ = run(go())
    server_nonce = bytes.fromhex(answer.server_nonce)
    assert answer.server_proof == token.server_proof(nonce, server_nonce).hex()
    assert proved == t.AuthProveResult(authenticated=True)
    assert initialized.protocol_version == 19


@pytest.mark.parametrize(("frame", "code", "why"), [
    ({"method": INITIALIZE.name, "params": {"protocol_version": 19, "client_info": {"name": "x"}}},
     Unauthorized.code, "expected auth.challenge, got initialize"),
    ({"method": SESSION_LIST.name, "params": {}}, Unauthorized.code, "got session.list"),
    ({"method": AUTH_PROVE.name, "params": {"client_proof": "00" * 32}}, Unauthorized.code,
     "expected auth.challenge, got auth.prove"),
    ({"method": AUTH_CHALLENGE.name, "params": {"client_nonce": "short"}}, Unauthorized.code,
     "auth.challenge:"),
])
def test_any_other_first_frame_is_refused_and_closed(
    tcp: TcpDaemon, frame: dict[str, Any], code: str, why: str
) -> None:
    (failure,), closed = run(_first_frames(tcp.address, frame))
    assert isinstance(failure, RpcFailure), failure
    assert failure.code == -32004 and failure.data_code == code
    assert why in failure.error.message
    assert "auth.challenge then auth.prove" in failure.error.message
    assert closed


def test_an_old_client_that_sends_the_token_in_clear_is_told_to_upgrade(tcp: TcpDaemon) -> None:
    frame = {"method": INITIALIZE.name, "params": {
        "protocol_version": 19, "client_info": {"name": "old"}, "auth_token": tcp.token}}
    (failure,), closed = run(_first_frames(tcp.address, frame))
    assert isinstance(failure, RpcFailure) and failure.data_code == ClearToken.code
    assert "upgrade the client" in failure.error.message
    assert "delete DATA_DIR/daemon.token" in failure.error.message  # it may be exposed
    assert closed


@pytest.mark.parametrize("wrong", ["another", "near", "reflected", "replayed"])
def test_a_wrong_client_proof_is_refused_and_closed(tcp: TcpDaemon, wrong: str) -> None:
    nonce = secrets.token_bytes(32)
    near = tcp.token[:-1] + ("A" if tcp.token[-1] != "A" else "B")

    async def go() -> tuple[list[Any], bool]:
        client = await DaemonClient.connect(tcp.address, initialize=False, authenticate=False)
        try:
            answer = await client.request(
                AUTH_CHALLENGE, t.AuthChallengeParams(client_nonce=nonce.hex()))
            server_nonce = bytes.fromhex(answer.server_nonce)
            proof = {
                "another": Token(secrets.token_urlsafe(32)).client_proof(server_nonce, nonce),
                "near": Token(near).client_proof(server_nonce, nonce),
                # the server's own proof sent back: the labels keep the directions apart
                "reflected": bytes.fromhex(answer.server_proof),
                # a right proof, but for another connection's nonce
                "replayed": Token(tcp.token).client_proof(secrets.token_bytes(32), nonce),
            }[wrong]
        finally:
            await client.close()
        return await _first_frames(tcp.address, _challenge(nonce), _prove(proof))

    (_, failure), closed = run(go())
    assert isinstance(failure, RpcFailure), failure
    assert failure.data_code == Unauthorized.code and "wrong client_proof" in failure.error.message
    assert closed


def test_a_client_with_a_wrong_token_refuses_the_daemon_before_proving_itself(
    tcp: TcpDaemon
) -> None:
    async def go() -> None:
        await DaemonClient.connect(tcp.address, token=secrets.token_urlsafe(32))

    with pytest.raises(ServerUnproven) as caught:
        run(go())
    assert caught.value.code == ServerUnproven.code
    assert "TREEMAIL_TOKEN" in caught.value.message


def test_the_proof_methods_are_refused_where_no_proof_is_due(tcp: TcpDaemon) -> None:
    async def go() -> list[RpcFailure]:
        over_tcp = await DaemonClient.connect(tcp.address, token=tcp.token)
        local = await tcp.client()
        failures = []
        try:
            for client in (over_tcp, local):
                with pytest.raises(RpcFailure) as caught:
                    await client.request(
                        AUTH_CHALLENGE, t.AuthChallengeParams(client_nonce="00" * 32))
                failures.append(caught.value)
            return failures
        finally:
            await over_tcp.close()
            await local.close()

    for failure in run(go()):
        assert failure.data_code == InvalidRequest.code
        assert "needs no proof" in failure.error.message


def test_with_the_token_tcp_serves_like_the_socket(tcp: TcpDaemon) -> None:
    async def go() -> tuple[t.SessionView, list[str]]:
        over_tcp = await DaemonClient.connect(tcp.address, token=tcp.token)
        local = await tcp.client()  # the Unix socket is still served, with no token
        try:
            made = await over_tcp.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            listed = await local.request(SESSION_LIST, t.SessionListParams())
            return made, [s.session_id for s in listed.sessions]
        finally:
            await over_tcp.close()
            await local.close()

    made, seen = run(go())
    assert made.session_id in seen


def test_the_cli_connects_over_tcp_with_the_token_file(
    tcp: TcpDaemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TREEMAIL_TOKEN", raising=False)
    assert main(["sessions", "--connect", tcp.address, "--data-dir", str(tcp.data_dir)]) == 0
    assert "SESSION" in capsys.readouterr().out
    monkeypatch.setenv("TREEMAIL_TOKEN", "wrong")
    assert main(["sessions", "--connect", tcp.address, "--data-dir", str(tcp.data_dir)]) == 1
    err = capsys.readouterr().err
    assert ServerUnproven.code in err and "Traceback" not in err
    monkeypatch.delenv("TREEMAIL_TOKEN")
    missing = tcp.data_dir / "nowhere"
    assert main(["sessions", "--connect", tcp.address, "--token-file", str(missing)]) == 1
    assert "TREEMAIL_TOKEN" in capsys.readouterr().err


class FakeListener:
    """Another local user on the daemon's port while the daemon is down: it keeps every byte
    it is sent, and answers the challenge as well as it can without the token."""

    def __init__(self, port: int, answer: str) -> None:
        self.port, self.answer = port, answer
        self.heard = bytearray()
        self.hung_up = asyncio.Event()

    async def __aenter__(self) -> FakeListener:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.readline()
        self.heard += first
        if self.answer == "bogus proof":  # a well-formed answer, with a proof it made up
            id = json.loads(first)["id"]
            writer.write(json.dumps({"jsonrpc": "2.0", "id": id, "result": {
                "server_nonce": secrets.token_hex(32), "server_proof": secrets.token_hex(32),
            }}).encode() + b"\n")
        else:  # "hang up": it has nothing to answer
            writer.close()
        self.heard += await reader.read()  # whatever the client sends next, until it closes
        self.hung_up.set()
        writer.close()


@pytest.mark.parametrize("answer", ["bogus proof", "hang up"])
def test_a_listener_without_the_token_learns_nothing_and_is_refused(
    tmp_path: Path, answer: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TREEMAIL_TOKEN", raising=False)
    gone = TcpDaemon(tmp_path / "data")  # the daemon made its token, then went down
    token, port = gone.token, gone.port
    assert gone.terminate()[0] == 0

    async def go() -> tuple[int, bytes]:
        async with FakeListener(port, answer) as fake:
            code = await asyncio.to_thread(main, [
                "sessions", "--connect", f"tcp://127.0.0.1:{port}",
                "--data-dir", str(tmp_path / "data")])
            await fake.hung_up.wait()  # the client closed the connection
            return code, bytes(fake.heard)

    code, heard = run(go())
    err = capsys.readouterr().err
    assert code == 1 and ServerUnproven.code in err and "Traceback" not in err
    # All it heard is one challenge: a random nonce, nothing derived from the token.
    frame = json.loads(heard)
    assert frame["method"] == AUTH_CHALLENGE.name and set(frame["params"]) == {"client_nonce"}
    assert heard.count(b"\n") == 1 and b"auth.prove" not in heard
    secret = token.encode()
    for form in (secret, secret.hex().encode(), base64.b64encode(secret),
                 hashlib.sha256(secret).hexdigest().encode()):
        assert form not in heard


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
    assert NotLoopback.code in done.stderr and "Traceback" not in done.stderr
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
    assert TokenFileUnsafe.code in done.stderr and "0644" in done.stderr


def test_a_port_in_use_is_a_clear_error_and_frees_the_data_dir(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _daemon(tmp_path / "data", "--tcp", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert ListenFailed.code in done.stderr and "Traceback" not in done.stderr
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
    assert b"rpc:unauthorized" in said and b"no handshake within 0.3s" in said
    assert waited < 10  # closed by the timeout, not by the test's end


def test_the_demo_runs_over_tcp(
    tcp: TcpDaemon, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREEMAIL_TOKEN", tcp.token)
    assert main(["demo", "--connect", tcp.address, "--approve"]) == 0
    assert "each exactly once" in capsys.readouterr().out


def test_a_second_daemon_is_told_the_first_ones_tcp_address(tcp: TcpDaemon) -> None:
    done = _daemon(tcp.data_dir)
    assert done.returncode == 2 and DataDirLocked.code in done.stderr
    assert f"pid {tcp.proc.pid}" in done.stderr and f"tcp 127.0.0.1:{tcp.port}" in done.stderr
