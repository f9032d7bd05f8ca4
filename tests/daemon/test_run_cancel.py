"""``treemail run`` and ``treemail cancel``, driven as a user drives them: the CLI in
subprocesses against a real daemon subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from tests.daemon.conftest import DaemonProcess, configured, run
from treemail.adapters.daemon.client import RpcFailure
from treemail.core.errors import NoRunInFlight, UnknownTarget
from treemail.core.events import EventKind
from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.errors import INVALID_PARAMS
from treemail.protocol.methods import Method

STEP = 60  # seconds any one command may take, however loaded the machine


P = TypeVar("P", bound=msgspec.Struct)


def _cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "treemail", *args, "--socket",
                           str(daemon.socket)], capture_output=True, text=True, timeout=STEP,
                          check=False)


def _call(daemon: DaemonProcess, method: Method[P, Any], params: P) -> Any:
    """One typed request; its answer as JSON data, which the assertions below read."""
    async def go() -> Any:
        client = await daemon.client()
        try:
            return msgspec.to_builtins(await client.request(method, params))
        finally:
            await client.close()

    return run(go())


@pytest.fixture
def slow(tmp_path: Path) -> Any:
    """A daemon whose scripted model keeps each reply in flight for a long while: a run is
    always in flight when the test acts."""
    data_dir = tmp_path / "slow"
    data_dir.mkdir(mode=0o700)
    (data_dir / "config.toml").write_text("[daemon.scripted]\ndelay = 600\n", encoding="utf-8")
    process = DaemonProcess(data_dir)
    yield process
    code, err = process.terminate()
    assert code == 0, err


def test_run_follows_a_root_and_a_delegated_child_to_the_end(daemon: DaemonProcess) -> None:
    done = _cli(daemon, "run", "default", "count the files", "--follow")
    assert done.returncode == 0, done.stderr
    first, *rows = done.stdout.splitlines()
    sid = first.split("(")[1].split(")")[0]
    assert first.startswith("session default_") and "runs default" in first
    assert any('"count the files"' in row for row in rows)
    assert rows[-1].split()[-3:] == ["run", "1", RunState.FINISHED]
    assert f"the run of {sid} finished" in done.stderr
    child = _cli(daemon, "run", "explore", "look around", "--parent", sid, "--follow",
                 "--json")
    assert child.returncode == 0, child.stderr
    lines = [json.loads(line) for line in child.stdout.splitlines()]
    session = lines[0]["session"]
    assert session["parent_session_id"] == sid and session["agent"] == "explore"
    task = _call(daemon, m.MESSAGE_GET, t.MessageGetParams(
        message_id=lines[0]["task_message_id"]))
    assert task["message"]["owner"] == "delegation"
    assert task["message"]["recipient"] == session["session_id"]
    assert {e["session_id"] for e in lines[1:]} == {session["session_id"]}
    assert lines[-1]["kind"] == EventKind.RUN_FINISHED
    assert _call(daemon, m.SESSION_GET, t.SessionGetParams(session_id=sid))["root_session_id"] == \
        session["root_session_id"]


def test_run_refuses_an_unknown_agent_and_an_empty_task(daemon: DaemonProcess) -> None:
    before = _call(daemon, m.SESSION_LIST, t.SessionListParams())["sessions"]
    done = _cli(daemon, "run", "nobody", "hi")
    assert done.returncode == 1 and "no agent 'nobody'" in done.stderr
    assert "[engine:invalid_request]" in done.stderr
    empty = _cli(daemon, "run", "default", "  ")
    assert empty.returncode == 2 and "the task is empty" in empty.stderr
    # Nothing was created.
    assert _call(daemon, m.SESSION_LIST, t.SessionListParams())["sessions"] == before


def test_cancel_interrupts_the_run_and_releases_its_mail(slow: DaemonProcess) -> None:
    follow = subprocess.Popen(
        [sys.executable, "-m", "treemail", "run", "default", "a long task", "--follow",
         "--socket", str(slow.socket)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        first = follow.stdout.readline()
        sid = first.split("(")[1].split(")")[0]
        # Wait for the row that says the model request is open: the task is claimed now.
        for line in follow.stdout:
            if "model request opened" in line:
                break
        else:
            pytest.fail(f"run --follow ended before its request opened: {follow.stderr}")
        cancelled = _cli(slow, "cancel", sid)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "interrupted (cancelled by user)" in cancelled.stdout
        out, err = follow.communicate(timeout=STEP)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(timeout=STEP)
    assert follow.returncode == 1, err
    assert "interrupted: cancelled by user" in err
    assert out.splitlines()[-1].endswith("run 1 interrupted (cancelled by user)")
    session = _call(slow, m.SESSION_GET, t.SessionGetParams(session_id=sid))
    assert session["state"] == SessionState.IDLE  # not woken again by its released mail
    mail = _call(slow, m.MESSAGE_LIST, t.MessageListParams(session_id=sid))["messages"]
    assert [m["state"] for m in mail] == [MessageState.RELEASED]  # kept for the next input
    receipt = _call(slow, m.MESSAGE_GET, t.MessageGetParams(message_id=mail[0]["message_id"]))
    assert [step["kind"] for step in receipt["history"]][-2:] == [
        EventKind.PRODUCER_MESSAGE_CLAIMED, EventKind.PRODUCER_MESSAGE_RELEASED]


def test_cancel_without_a_run_or_a_session_is_a_typed_error(slow: DaemonProcess) -> None:
    root = _call(slow, m.SESSION_CREATE, t.SessionCreateParams(agent="default"))
    idle = _cli(slow, "cancel", root["session_id"])
    assert idle.returncode == 1
    assert "has no run in flight (it is idle)" in idle.stderr
    assert idle.stderr.rstrip().endswith("[run:not_in_flight]")
    as_json = json.loads(_cli(slow, "cancel", root["session_id"], "--json").stderr)
    assert as_json["code"] == NoRunInFlight.code
    nobody = _cli(slow, "cancel", "nobody")
    assert nobody.returncode == 1 and "[engine:unknown_target]" in nobody.stderr
    with pytest.raises(RpcFailure) as refused:
        _call(slow, m.RUN_CANCEL, t.RunCancelParams(session_id=str(uuid.uuid4())))
    assert refused.value.data_code == UnknownTarget.code
    again = _call(slow, m.SESSION_GET, t.SessionGetParams(session_id=root["session_id"]))
    assert again["state"] == SessionState.IDLE


def test_cancel_tells_a_delegating_parent(slow: DaemonProcess) -> None:
    root = _call(slow, m.SESSION_CREATE, t.SessionCreateParams(agent="default"))
    child = _cli(slow, "run", "explore", "dig", "--parent", root["session_id"], "--json")
    assert child.returncode == 0, child.stderr
    cid = json.loads(child.stdout)["session"]["session_id"]
    cancelled = _cli(slow, "cancel", cid, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    answer = json.loads(cancelled.stdout)
    assert answer["run"]["status"] == RunState.INTERRUPTED
    assert answer["session"]["state"] == SessionState.IDLE
    told = _call(slow, m.MESSAGE_LIST,
                 t.MessageListParams(session_id=root["session_id"]))["messages"]
    assert [(m["owner"], m["sender"]) for m in told] == [("delegation", cid)]
    assert "cancelled by user" in told[0]["body"]


def _follow_once(data_dir: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``treemail run ARGS --follow`` on a daemon of its own, started with ``config``."""
    (data_dir / "agents").mkdir(parents=True, mode=0o700, exist_ok=True)
    (data_dir / "config.toml").write_text(config, encoding="utf-8")
    daemon = DaemonProcess(data_dir)
    try:
        done = _cli(daemon, "run", *args, "--follow")
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    return done


def test_a_run_over_its_configured_budget_ends_saying_which(tmp_path: Path) -> None:
    # Its first reply delegates; its second (reading the tool result) is one request too many.
    (tmp_path / "budget" / "agents").mkdir(parents=True, mode=0o700)
    (tmp_path / "budget" / "agents" / "boss.md").write_text(
        "---\nname: boss\n---\ndelegate explore: look around\n", encoding="utf-8")
    done = _follow_once(tmp_path / "budget", "[runs]\nmax_model_requests = 1\n", "boss",
                        "plan it")
    assert done.returncode == 1, done.stderr
    assert "interrupted: run budget exhausted: the run made 1 model request," in done.stderr
    assert "[runs] max_model_requests" in done.stderr


def test_follow_goes_on_into_the_retry_of_a_run_whose_model_failed(tmp_path: Path) -> None:
    from tests.fuzz.fake_server import Plan, serving

    with serving() as server:
        server.answer_with([Plan(status=503, body=b"{}")])  # then a plain reply: "done"
        done = _follow_once(tmp_path / "retry", f'[daemon]\nmodel = "openai"\n[daemon.openai]\n'
                            f'base_url = "{server.base_url}"\nmodel = "m"\n', "default",
                            "try twice")
    assert done.returncode == 0, done.stderr
    ends = [line.split()[-3:] for line in done.stdout.splitlines() if " run " in line]
    assert ends[-1] == ["run", "2", RunState.FINISHED]
    assert any("run 1 interrupted (model error" in line for line in done.stdout.splitlines())


def _sessions(daemon: DaemonProcess) -> list[str]:
    listed = _call(daemon, m.SESSION_LIST, t.SessionListParams())
    return [session["session_id"] for session in listed["sessions"]]


def test_a_run_whose_task_is_refused_leaves_no_session_behind(tmp_path: Path) -> None:
    # Frames the daemon reads are capped small: a session.create alone fits, the long task
    # does not. Creating first and submitting after would leave an idle session behind.
    daemon = configured(tmp_path / "data", "[daemon.limits]\nmax_frame_bytes = 4096\n")
    try:
        before = _sessions(daemon)
        done = _cli(daemon, "run", "default", "x" * 8000)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert _sessions(daemon) == before
        fits = _cli(daemon, "run", "default", "a short task")
        assert fits.returncode == 0, fits.stderr
        assert len(_sessions(daemon)) == len(before) + 1
    finally:
        code, err = daemon.terminate()
    assert code == 0, err


def test_a_session_create_with_a_refused_task_creates_nothing(daemon: DaemonProcess) -> None:
    before = _sessions(daemon)
    with pytest.raises(RpcFailure) as caught:
        _call(daemon, m.SESSION_CREATE, t.SessionCreateParams(agent="default", task=" \n "))
    assert caught.value.code == INVALID_PARAMS and "$.task" in str(caught.value)
    assert _sessions(daemon) == before
    made = _call(daemon, m.SESSION_CREATE, t.SessionCreateParams(agent="default",
                                                                  task="count the files"))
    (task,) = _call(daemon, m.MESSAGE_LIST, t.MessageListParams(
        session_id=made["session_id"]))["messages"]
    assert task["owner"] == "user" and task["body"] == "count the files"
