"""Protocol 19 on the wire: the handshake, and every kind of bad request answered with a
JSON-RPC error while the daemon keeps serving this client and the others."""

from __future__ import annotations

import json
import stat
from typing import Any, TypeVar

import msgspec
import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.errors import DataDirLocked
from treemail.core.errors import InvalidRequest, UnknownTarget
from treemail.protocol import types as t
from treemail.protocol.methods import (
    METHODS,
    NOTIFICATIONS,
    PROTOCOL_VERSION,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_DELEGATE,
    SESSION_GET,
    SESSION_LIST,
    Method,
)
from treemail.protocol.rpc_errors import (
    FrameNotJson,
    FrameNotUtf8,
    FrameTooLarge,
    InvalidParams,
    NotInitialized,
    NotJsonRpc,
    Overloaded,
    UnknownMethod,
    UnsupportedVersion,
)

P = TypeVar("P", bound=msgspec.Struct)


async def _failure(client: DaemonClient, method: Method[P, Any], params: P) -> RpcFailure:
    with pytest.raises(RpcFailure) as caught:
        await client.request(method, params)
    return caught.value


async def _raw_failure(client: DaemonClient, method: str, params: Any) -> RpcFailure:
    """A request the types cannot express (an unknown method, params of the wrong shape)."""
    with pytest.raises(RpcFailure) as caught:
        await client.call_raw(method, params)
    return caught.value


async def _still_serving(*clients: DaemonClient) -> None:
    for client in clients:
        listed = await client.request(SESSION_LIST, t.SessionListParams())
        assert isinstance(listed.sessions, list)


def test_handshake(daemon: DaemonProcess) -> None:
    async def go() -> t.InitializeResult | None:
        client = await daemon.client()
        await client.close()
        return client.server

    server = run(go())
    assert PROTOCOL_VERSION == 19
    assert server is not None and server.protocol_version == 19
    assert server.server_info.name == "treemail-daemon"
    capabilities = server.capabilities
    # Every method of the table is served, and said to be: the list is the handlers'.
    assert capabilities.methods == sorted(METHODS)
    assert capabilities.notifications == sorted(NOTIFICATIONS)
    assert capabilities.max_frame_bytes > 0 and capabilities.max_in_flight > 0
    assert capabilities.plugin_body_max_bytes == 256 * 1024


def test_the_public_client_name_is_the_same_client() -> None:
    import treemail.client

    assert treemail.client.DaemonClient is DaemonClient
    assert treemail.client.PROTOCOL_VERSION == 19


def test_socket_only_for_its_user(daemon: DaemonProcess) -> None:
    mode = daemon.socket.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_other_version_is_refused_clearly(daemon: DaemonProcess) -> None:
    async def go() -> tuple[RpcFailure, t.InitializeResult]:
        client = await DaemonClient.connect(daemon.socket, initialize=False)
        try:
            with pytest.raises(RpcFailure) as caught:
                await client.initialize("old", version=18)
            # The connection stays usable: the right version is accepted next.
            return caught.value, await client.initialize("new")
        finally:
            await client.close()

    refused, accepted = run(go())
    assert refused.code == -32003 and refused.data_code == UnsupportedVersion.code
    assert "18" in refused.error.message and "19" in refused.error.message
    assert accepted.protocol_version == 19


def test_request_before_initialize_is_refused(daemon: DaemonProcess) -> None:
    async def go() -> tuple[RpcFailure, RpcFailure]:
        client = await DaemonClient.connect(daemon.socket, initialize=False)
        try:
            early = await _failure(client, SESSION_LIST, t.SessionListParams())
            unknown = await _raw_failure(client, "no.such", {})
            await client.initialize("late")
            await _still_serving(client)
            return early, unknown
        finally:
            await client.close()

    early, unknown = run(go())
    assert early.code == -32002 and early.data_code == NotInitialized.code
    assert unknown.code == -32601  # an unknown method is unknown whatever the state


def test_second_initialize_is_refused(daemon: DaemonProcess) -> None:
    async def go() -> RpcFailure:
        client = await daemon.client()
        try:
            with pytest.raises(RpcFailure) as caught:
                await client.initialize("again")
            return caught.value
        finally:
            await client.close()

    again = run(go())
    assert again.data_code == InvalidRequest.code


BAD_FRAMES: list[tuple[str, bytes, int, str]] = [
    ("malformed JSON", b'{"jsonrpc": "2.0", "id": 1, "method": \n', -32700, FrameNotJson.code),
    ("invalid UTF-8", b'{"jsonrpc": "2.0", "id": 1, "method": "\xff\xfe"}\n', -32700,
     FrameNotUtf8.code),
    ("not an object", b"[1, 2, 3]\n", -32600, NotJsonRpc.code),
    ("no jsonrpc field", b'{"id": 1, "method": "session.list"}\n', -32600,
     NotJsonRpc.code),
    ("params not an object", b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]}\n',
     -32600, NotJsonRpc.code),
]


@pytest.mark.parametrize(("case", "frame", "code", "data_code"), BAD_FRAMES,
                         ids=[case for case, *_ in BAD_FRAMES])
def test_bad_frame_gets_an_error_and_serving_goes_on(
    daemon: DaemonProcess, case: str, frame: bytes, code: int, data_code: str
) -> None:
    async def go() -> Any:
        bad, other = await daemon.client(), await daemon.client()
        try:
            await bad.send_raw(frame)
            error = await bad.stray_errors.get()
            await _still_serving(bad, other)
            return error
        finally:
            await bad.close()
            await other.close()

    error = run(go())
    assert error.code == code and error.data is not None and error.data.code == data_code


def test_error_answer_carries_the_request_id(daemon: DaemonProcess) -> None:
    async def go() -> list[Any]:
        client = await daemon.client()
        try:
            return await client.call_many_raw([("no.such", {}), (SESSION_LIST.name, {})])
        finally:
            await client.close()

    unknown, listed = run(go())
    assert isinstance(unknown, RpcFailure) and unknown.code == -32601
    assert "sessions" in listed


def test_oversized_frame_is_dropped_with_an_error(daemon: DaemonProcess) -> None:
    async def go() -> Any:
        client, other = await daemon.client(), await daemon.client()
        try:
            limit = client.capabilities.max_frame_bytes
            body = "x" * (limit + 10)
            frame = json.dumps({"jsonrpc": "2.0", "id": 9, "method": RUN_SUBMIT.name,
                                "params": {"session_id": "s", "text": body}}).encode()
            # Written in pieces, as a slow client would: the daemon never holds it whole.
            for start in range(0, len(frame), 50_000):
                await client.send_raw(frame[start:start + 50_000])
            await client.send_raw(b"\n")
            error = await client.stray_errors.get()
            await _still_serving(client, other)
            return error, len(frame)
        finally:
            await client.close()
            await other.close()

    error, size = run(go())
    assert error.code == -32600 and error.data.code == FrameTooLarge.code
    assert str(size) in error.message


def test_unknown_method(daemon: DaemonProcess) -> None:
    async def go() -> RpcFailure:
        client = await daemon.client()
        try:
            failure = await _raw_failure(client, "session.explode", {})
            await _still_serving(client)
            return failure
        finally:
            await client.close()

    failure = run(go())
    assert failure.code == -32601 and failure.data_code == UnknownMethod.code
    assert "session.explode" in failure.error.message


@pytest.mark.parametrize(("params", "path"), [
    ({"session_id": 42}, "$.session_id"),
    ({"session_id": "a", "text": ["not", "text"]}, "$.text"),
    ({"session_id": "a", "text": "hi", "mode": "steer"}, "mode"),
    ({}, "session_id"),
])
def test_wrong_params_are_invalid_params(daemon: DaemonProcess, params: dict[str, Any],
                                         path: str) -> None:
    async def go() -> RpcFailure:
        client = await daemon.client()
        try:
            failure = await _raw_failure(client, RUN_SUBMIT.name, params)
            await _still_serving(client)
            return failure
        finally:
            await client.close()

    failure = run(go())
    assert failure.code == -32602 and failure.data_code == InvalidParams.code
    assert path in failure.error.message and RUN_SUBMIT.name in failure.error.message


def test_treemail_errors_keep_their_stable_code(daemon: DaemonProcess) -> None:
    async def go() -> tuple[RpcFailure, RpcFailure]:
        client = await daemon.client()
        try:
            unknown = await _failure(client, SESSION_GET, t.SessionGetParams(session_id="nope"))
            no_agent = await _failure(client, SESSION_CREATE,
                                      t.SessionCreateParams(agent="nobody"))
            return unknown, no_agent
        finally:
            await client.close()

    unknown, no_agent = run(go())
    assert unknown.code == -32011 and unknown.data_code == UnknownTarget.code
    assert no_agent.data_code == InvalidRequest.code and "nobody" in no_agent.error.message


def test_too_many_requests_in_flight_are_answered_overloaded(daemon: DaemonProcess) -> None:
    async def go() -> tuple[list[Any], int]:
        client = await daemon.client()
        try:
            limit = client.capabilities.max_in_flight
            # One write: the daemon reads them all before any has been answered.
            outcomes = await client.request_many(SESSION_LIST,
                                                 [t.SessionListParams()] * (limit * 4))
            await _still_serving(client)
            return outcomes, limit
        finally:
            await client.close()

    outcomes, limit = run(go())
    overloaded = [o for o in outcomes if isinstance(o, RpcFailure)]
    served = [o for o in outcomes if isinstance(o, t.SessionListResult)]
    assert len(served) + len(overloaded) == len(outcomes)  # each answered exactly once
    assert overloaded and all(o.code == -32001 and o.data_code == Overloaded.code
                              for o in overloaded)
    assert len(served) >= limit


def test_second_daemon_on_the_data_dir_is_refused(daemon: DaemonProcess) -> None:
    import subprocess
    import sys

    second = subprocess.run(
        [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(daemon.data_dir),
         "--socket", str(daemon.data_dir / "other.sock")],
        capture_output=True, text=True, timeout=30)
    assert second.returncode == 2
    assert DataDirLocked.code in second.stderr
    assert f"pid {daemon.proc.pid}" in second.stderr and str(daemon.socket) in second.stderr
    assert "Traceback" not in second.stderr
    assert daemon.socket.exists()  # the first daemon's socket is untouched


@pytest.mark.parametrize("task", ["", "   ", "\n\t"])
def test_a_delegation_without_a_task_is_refused_like_empty_mail(
    daemon: DaemonProcess, task: str,
) -> None:
    async def go() -> tuple[RpcFailure, RpcFailure, list[Any]]:
        client = await daemon.client()
        try:
            root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            sid = root.session_id
            blank_task = await _failure(client, SESSION_DELEGATE, t.SessionDelegateParams(
                parent_session_id=sid, agent="default", task=task))
            blank_mail = await _failure(client, RUN_SUBMIT,
                                        t.RunSubmitParams(session_id=sid, text=task))
            tree = await client.request(SESSION_LIST, t.SessionListParams(root_session_id=sid))
            return blank_task, blank_mail, tree.sessions
        finally:
            await client.close()

    blank_task, blank_mail, tree = run(go())
    # Both are refused as params, as the schema of spec/bindings refuses them.
    assert blank_task.data_code == blank_mail.data_code == InvalidParams.code
    assert blank_task.code == blank_mail.code
    assert "not empty or only whitespace - at `$.task`" in blank_task.error.message
    assert len(tree) == 1  # no child was made
