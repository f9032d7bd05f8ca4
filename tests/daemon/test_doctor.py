"""``treemail doctor``, run as a user runs it (a subprocess), against a real daemon
subprocess and a local OpenAI-compatible server that fails in each way a setup does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.fuzz.fake_server import FakeServer, Plan, serving
from treemail.core.lifecycle import SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import SESSION_CREATE

STEP = 60  # seconds any one command may take, however loaded the machine
KEY = "TREEMAIL_TEST_DOCTOR_KEY"
MODELS = json.dumps({"object": "list", "data": [{"id": "m"}, {"id": "other"}]}).encode()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serving() as fake:
        yield fake


def _doctor(data_dir: Path, *args: str, env: Mapping[str, str] | None = None
            ) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "doctor", "--data-dir", str(data_dir), "--json",
         *args], capture_output=True, text=True, timeout=STEP, check=False,
        env={**os.environ, KEY: "", **(env or {})})
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def _by_check(findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in findings}


def _data_dir(where: Path, config: str, mode: int) -> Path:
    """A private data directory whose config.toml holds ``config``, with ``mode``."""
    where.mkdir(mode=0o700, exist_ok=True)
    data_dir = where / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "config.toml").write_text(config, encoding="utf-8")
    (data_dir / "config.toml").chmod(mode)
    return data_dir


def _openai(where: Path, base_url: str) -> Path:
    return _data_dir(where, f'[daemon]\nmodel = "openai"\n[daemon.openai]\nbase_url = '
                            f'"{base_url}"\nmodel = "m"\napi_key_env = "{KEY}"\n', 0o600)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_healthy_data_dir_beside_its_running_daemon(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "data")
    try:
        code, findings, _ = _doctor(daemon.data_dir)
        after = run(_create(daemon))  # the doctor took nothing from the store's owner
    finally:
        stopped, err = daemon.terminate()
    assert stopped == 0, err
    assert code == 0, findings
    assert [f["check"] for f in findings] == ["data dir", "config", "store", "daemon", "model"]
    assert {f["status"] for f in findings} == {"ok"}
    found = _by_check(findings)
    assert "opens read-only and verifies" in found["store"]["detail"]
    assert "protocol 19" in found["daemon"]["detail"]
    assert after["state"] == SessionState.IDLE


async def _create(daemon: DaemonProcess) -> Any:
    client = await daemon.client()
    try:
        return msgspec.to_builtins(await client.request(
            SESSION_CREATE, t.SessionCreateParams(agent="default")))
    finally:
        await client.close()


def test_files_open_to_others_and_no_daemon(tmp_path: Path) -> None:
    data_dir = _data_dir(tmp_path, "", 0o644)
    code, findings, _ = _doctor(data_dir)
    assert code == 1
    found = _by_check(findings)
    assert found["data dir"]["status"] == "fail"
    assert "config.toml (0644)" in found["data dir"]["detail"]
    assert found["data dir"]["hint"] == f"run chmod -R go-rwx {data_dir}"
    assert found["daemon"]["status"] == "warn" and "treemail daemon" in found["daemon"]["hint"]
    assert found["store"]["status"] == "warn"  # none yet: the daemon makes it


def test_a_config_the_daemon_would_refuse_fails(tmp_path: Path) -> None:
    code, findings, _ = _doctor(_data_dir(tmp_path, "[deamon]\n", 0o600))
    assert code == 1
    found = _by_check(findings)
    assert found["config"]["status"] == "fail" and "daemon" in found["config"]["detail"]
    assert "model" not in found  # nothing to check it by


@pytest.mark.parametrize("failure", ["401", "down", "no scheme", "500"])
def test_a_model_endpoint_that_fails_says_how(tmp_path: Path, server: FakeServer,
                                              failure: str) -> None:
    host = f"127.0.0.1:{server.server_address[1]}"
    base = {"down": f"http://127.0.0.1:{_closed_port()}/v1", "no scheme": f"{host}/v1"}.get(
        failure, server.base_url)
    server.answer_with([Plan(status=401, body=b'{"error": "bad key"}')] if failure == "401"
                       else [Plan(status=500, body=b"{}")] if failure == "500" else [])
    code, findings, _ = _doctor(_openai(tmp_path, base), "--timeout", "10",
                                env={KEY: "sk-wrong"})
    assert code == 1
    model = _by_check(findings)["model"]
    assert model["status"] == "fail"
    expected = {
        "401": ("refused the key (HTTP 401)", f"the key in {KEY} is refused"),
        "down": ("cannot reach", "check base_url and that the server is running"),
        "no scheme": (f"base_url '{host}/v1' cannot be reached",
                      f"write it as http://{host}/v1"),
        "500": ("answered HTTP 500", "the endpoint is failing"),
    }[failure]
    assert expected[0] in model["detail"] and expected[1] in model["hint"]
    if failure in ("down", "no scheme"):
        assert server.requests == []


def test_a_model_endpoint_that_answers_takes_the_key(tmp_path: Path,
                                                     server: FakeServer) -> None:
    server.answer_with([Plan(body=MODELS)])
    code, findings, _ = _doctor(_openai(tmp_path, server.base_url),
                                env={KEY: "sk-good"})
    assert code == 0, findings
    model = _by_check(findings)["model"]
    assert model["status"] == "ok" and "with the key (HTTP 200)" in model["detail"]
    assert server.requests == [b"GET /v1/models Bearer sk-good"]


def test_a_missing_key_and_an_unlisted_model_are_said(tmp_path: Path,
                                                      server: FakeServer) -> None:
    server.answer_with([Plan(status=401, body=b"{}")])
    code, findings, _ = _doctor(_openai(tmp_path / "one", server.base_url))
    assert code == 1
    assert _by_check(findings)["model"]["hint"] == f"export {KEY} with a valid key"
    assert server.requests == [b"GET /v1/models -"]  # no key was sent: none is set
    server.answer_with([Plan(body=json.dumps({"data": [{"id": "x"}]}).encode())])
    code, findings, _ = _doctor(_openai(tmp_path / "two", server.base_url),
                                env={KEY: "sk-good"})
    assert code == 0  # a warning, not a failure
    model = _by_check(findings)["model"]
    assert model["status"] == "warn" and "model 'm' is not among the 1" in model["detail"]


def test_text_lines_say_status_check_and_hint(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    done = subprocess.run([sys.executable, "-m", "treemail", "doctor", "--data-dir",
                           str(data_dir)], capture_output=True, text=True, timeout=STEP,
                          check=False)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["fail", "ok", "warn", "warn", "ok"]
    assert lines[0] == (f"fail data dir  open to other users: {data_dir} (0755); run chmod -R "
                        f"go-rwx {data_dir}")
