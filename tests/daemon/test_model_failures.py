"""A real model that fails says why, everywhere: in the replay rows (HTTP status, endpoint,
hint), in ``DATA_DIR/daemon.log`` (private) and on the daemon's stderr, which also warns at
start when the API key's variable is unset. Against a real daemon subprocess and a local
OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.fuzz.fake_server import FakeServer, Plan, serving, streamed
from treemail.core.events import EventKind
from treemail.core.lifecycle import RunState
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_READ, RUN_SUBMIT, SESSION_CREATE

NO_KEY = "TREEMAIL_TEST_UNSET_KEY"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serving() as fake:
        yield fake


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _daemon(data_dir: Path, base_url: str, extra: str = "") -> DaemonProcess:
    data_dir.mkdir(mode=0o700)
    (data_dir / "config.toml").write_text(
        f'[daemon]\nmodel = "openai"\n[daemon.openai]\nbase_url = "{base_url}"\n'
        f'model = "m"\napi_key_env = "{NO_KEY}"\n{extra}', encoding="utf-8")
    return DaemonProcess(data_dir, env={NO_KEY: ""})


def _given_up(daemon: DaemonProcess) -> str:
    """Submit to a new session and wait until its model failed often enough that it gave up;
    the session's id."""
    async def go() -> str:
        client = await daemon.client()
        try:
            root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            sid: str = root.session_id
            await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="hello"))
            while True:
                page = await client.request(
                    EVENTS_READ, t.EventsReadParams(after=0, session_id=sid))
                if any(e.kind == EventKind.RUN_INTERRUPTED and "in a row" in e.data["reason"]
                       for e in page.events):
                    return sid
                await asyncio.sleep(0.05)
        finally:
            await client.close()

    return run(go())


def _replay(daemon: DaemonProcess, sid: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "replay", sid, "--socket", str(daemon.socket)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def _failure_shown(tmp_path: Path, base_url: str, *expected: str, extra: str = "") -> str:
    daemon = _daemon(tmp_path / "data", base_url, extra)
    try:
        sid = _given_up(daemon)
        rows = [line for line in _replay(daemon, sid).splitlines() if RunState.INTERRUPTED in line]
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert rows, "no interrupted row"
    log = tmp_path / "data" / "daemon.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text(encoding="utf-8")
    for fragment in expected:
        assert all(fragment in row for row in rows), (fragment, rows)
        assert fragment in text, (fragment, text)
        assert fragment in err, (fragment, err)
    assert "model:error\n" not in err and "Traceback" not in err
    return err


def test_a_refused_key_shows_the_status_the_endpoint_and_the_hint(
    tmp_path: Path, server: FakeServer
) -> None:
    server.answer_with([Plan(status=401, body=b'{"error": "bad key"}')] * 20)
    err = _failure_shown(tmp_path, server.base_url, "HTTP 401",
                         f"{server.base_url}/chat/completions", "check the API key")
    # Said at start, before any call failed: the key's variable is empty.
    assert f"warning: the API key variable {NO_KEY} is unset" in err
    assert "model openai m at " + server.base_url in err


def test_a_stream_cut_mid_reply_shows_the_status_the_endpoint_and_the_hint(
    tmp_path: Path, server: FakeServer
) -> None:
    server.answer_with([Plan(mode="cut", chunks=streamed("half a ", done=False))] * 20)
    _failure_shown(tmp_path, server.base_url, "HTTP 200",
                   f"{server.base_url}/chat/completions", "dropped the connection mid-reply",
                   extra="stream = true\n")
    assert all(json.loads(request)["stream"] is True for request in server.requests)


def test_a_server_that_is_down_shows_the_endpoint_and_the_hint(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    _failure_shown(tmp_path, url, f"{url}/chat/completions",
                   "check base_url and that the server is running")


def test_a_base_url_without_a_scheme_says_so(tmp_path: Path) -> None:
    url = f"localhost:{_closed_port()}/v1"
    err = _failure_shown(tmp_path, url, "has no http:// or https:// scheme")
    assert err.count("has no http:// or https:// scheme") >= 2  # at start, and per failure


def test_a_log_path_taken_by_a_symlink_is_not_followed_and_the_daemon_serves_on(
    tmp_path: Path,
) -> None:
    data, target = tmp_path / "data", tmp_path / "elsewhere"
    data.mkdir(mode=0o700)
    (data / "config.toml").write_text("", encoding="utf-8")
    (data / "daemon.log").symlink_to(target)
    daemon = DaemonProcess(data)
    code, err = daemon.terminate()
    assert code == 0, err
    assert not target.exists()
    assert f"warning: cannot write {data / 'daemon.log'}" in err and "Traceback" not in err
