"""The client never waits for ever: against a real daemon subprocess, a request over the
daemon's frame limit, an answer over the client's, and a daemon that is stopped (SIGSTOP)
each fail the call at once with a typed error, and the command line says so in one line and
exits non-zero. Nothing here waits on a clock but the timeouts under test, which are short
and checked against nothing but the error they raise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import Call, DaemonClient, RpcFailure
from treemail.adapters.daemon.errors import AnswerTooLarge, ClientTimeout, RequestTooLarge
from treemail.protocol import types as t
from treemail.protocol.methods import (
    INITIALIZE,
    MESSAGE_GET,
    MESSAGE_LIST,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_GET,
    SESSION_LIST,
)
from treemail.protocol.rpc_errors import NotInitialized

STEP = 60  # seconds any one step may take, however loaded the machine
OVER = 2 << 20  # more than the daemon's 1 MiB frame limit


@pytest.fixture
def stoppable(tmp_path: Path) -> Iterator[DaemonProcess]:
    """A daemon of this test alone, which the test may SIGSTOP: it is always continued and
    stopped in order afterwards."""
    process = DaemonProcess(tmp_path / "data")
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            os.kill(process.proc.pid, signal.SIGCONT)
        code, err = process.terminate()
        assert code == 0, err


def test_a_request_over_the_daemons_limit_is_refused_before_it_is_sent(
    daemon: DaemonProcess,
) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            sid = root.session_id
            with pytest.raises(RequestTooLarge) as refused:
                await client.request(
                    RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="x" * OVER), timeout=STEP)
            assert refused.value.code == RequestTooLarge.code
            assert refused.value.details["limit"] == 1 << 20
            assert RUN_SUBMIT.name in refused.value.message
            # Nothing reached the daemon: no mail, and the connection serves on.
            assert await client.every(MESSAGE_LIST, t.MessageListParams(session_id=sid)) == []
        finally:
            await client.close()

    run(go())


def test_a_frame_the_daemon_drops_unread_fails_its_call_not_the_others(
    daemon: DaemonProcess,
) -> None:
    """A client that does not know the limit (no ``initialize`` answer yet) sends it; the
    daemon's error with a null id fails that call at once, and only that one."""
    async def go() -> None:
        client = await DaemonClient.connect(daemon.socket, initialize=False)
        try:
            outcomes = await client.pipeline([
                Call(INITIALIZE, t.InitializeParams(
                    protocol_version=19, client_info=t.ClientInfo(name="x" * OVER))),
                Call(SESSION_LIST, t.SessionListParams())], timeout=STEP)
            assert isinstance(outcomes[0], RequestTooLarge), outcomes
            size, limit = outcomes[0].details["size"], outcomes[0].details["limit"]
            assert isinstance(size, int) and isinstance(limit, int), outcomes[0].details
            assert size > limit == 1 << 20
            # The small one was answered by the daemon itself (it is not initialized yet).
            assert isinstance(outcomes[1], RpcFailure)
            assert outcomes[1].data_code == NotInitialized.code
            assert client.stray_errors.empty()  # the null-id error was taken, not left over
        finally:
            await client.close()

    run(go())


def test_an_answer_over_the_clients_limit_fails_that_call_and_the_client_goes_on(
    daemon: DaemonProcess,
) -> None:
    async def go() -> None:
        writer = await daemon.client()
        small = await DaemonClient.connect(daemon.socket, max_frame_bytes=64 << 10,
                                           timeout=STEP)
        try:
            root = await writer.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            sent = await writer.request(RUN_SUBMIT, t.RunSubmitParams(
                session_id=root.session_id, text="y" * (200 << 10)))
            with pytest.raises(AnswerTooLarge) as dropped:
                await small.request(MESSAGE_GET, t.MessageGetParams(message_id=sent.message_id))
            assert dropped.value.code == AnswerTooLarge.code
            assert dropped.value.details["limit"] == 64 << 10
            size = dropped.value.details["size"]
            assert isinstance(size, int) and size > 200 << 10
            got = await small.request(SESSION_GET, t.SessionGetParams(session_id=root.session_id))
            assert got.session_id == root.session_id
        finally:
            await small.close()
            await writer.close()

    run(go())


def test_a_stopped_daemon_times_the_call_out_and_answers_once_continued(
    stoppable: DaemonProcess,
) -> None:
    async def go() -> None:
        client = await stoppable.client()
        try:
            os.kill(stoppable.proc.pid, signal.SIGSTOP)
            with pytest.raises(ClientTimeout) as late:
                await client.request(SESSION_LIST, t.SessionListParams(), timeout=0.3)
            assert late.value.code == ClientTimeout.code
            assert late.value.details == {"method": SESSION_LIST.name, "timeout": 0.3}
            # A new client's handshake times out the same way (the kernel still accepts).
            with pytest.raises(ClientTimeout):
                await DaemonClient.connect(stoppable.socket, timeout=0.3)
            os.kill(stoppable.proc.pid, signal.SIGCONT)
            # The late answer to the timed-out call is dropped; the next call is answered.
            listed = await client.request(SESSION_LIST, t.SessionListParams(), timeout=STEP)
            assert listed.sessions == [] and listed.next is None
        finally:
            await client.close()

    run(go())


def test_the_command_line_says_a_stopped_daemon_did_not_answer(
    stoppable: DaemonProcess,
) -> None:
    os.kill(stoppable.proc.pid, signal.SIGSTOP)
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "sessions", "--data-dir", str(stoppable.data_dir),
         "--timeout", "0.3"], capture_output=True, text=True, timeout=STEP)
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    # What happened first, the stable code last.
    assert lines[0].startswith("treemail sessions: no answer to initialize within 0.3s"), lines
    assert lines[0].endswith(" [client:timeout]"), lines
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_the_command_line_refuses_a_bad_timeout(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "sessions", "--data-dir", str(tmp_path),
         "--timeout", "0"], capture_output=True, text=True, timeout=STEP)
    assert done.returncode == 2 and "must be above 0" in done.stderr

