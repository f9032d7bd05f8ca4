"""JSON-RPC frames against a real daemon: arbitrary bytes, invalid UTF-8, deep JSON, huge and
odd ids, and params generated from spec/bindings (valid ones, and ones with wrong types,
unknown keys or missing keys). Every frame that is a request gets exactly one answer, a
result or an error carrying a stable treemail code (never ``rpc:internal`` or a ``store:``
failure); every other
frame gets at most one answer; and after each frame the same connection still answers a
probe, so the daemon keeps serving. At the end a second client is served too and the
daemon's stderr holds no traceback.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.daemon.conftest import DaemonProcess, run
from tests.fuzz.conftest import TALLY
from tests.fuzz.schema_values import JSON_VALUES, params_for
from treemail.protocol import types as t
from treemail.protocol.methods import (
    INITIALIZE,
    METHODS,
    PROTOCOL_VERSION,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_LIST,
    SHUTDOWN,
)
from treemail.protocol.rpc_errors import FrameNotJson, InternalError

SURFACE = "json-rpc frames"
TIMEOUT = 20.0  # seconds without an answer: a hang
# shutdown would end the daemon under test; every other method is fair game.
FUZZED = sorted(set(METHODS) - {SHUTDOWN.name})


class Line:
    """A raw, initialised connection: frames out, answer lines in."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(str(path))
        self.buffer = b""
        self.probes = 0
        self.exchange(json.dumps({
            "jsonrpc": "2.0", "id": "init", "method": INITIALIZE.name,
            "params": {"protocol_version": PROTOCOL_VERSION,
                       "client_info": {"name": "fuzz"}}}).encode())
        # Real ids, so generated params also reach past the lookups (see ``aim``).
        [root] = self.exchange(request("root", SESSION_CREATE.name, {"agent": "default"}), True)
        sid = root["result"]["session_id"]
        [mail] = self.exchange(request("mail", RUN_SUBMIT.name, {"session_id": sid, "text": "hi"}),
                               True)
        self.known = [sid, mail["result"]["message_id"]]

    def read_line(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)  # a timeout here is a hang: it raises
            assert chunk, "the daemon closed the connection"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message = json.loads(line)
        assert isinstance(message, dict), line[:200]
        return message

    def exchange(self, frame: bytes, request: bool = False) -> list[dict[str, Any]]:
        """Send ``frame`` and a probe; the answers to ``frame``. A frame that is not a
        request is answered (if at all) before the next frame is read, so before the probe;
        a request runs as its own task, so its answer may come after the probe's."""
        self.probes += 1
        probe = f"probe-{self.probes}"
        self.sock.sendall(frame + b"\n" + json.dumps(
            {"jsonrpc": "2.0", "id": probe, "method": SESSION_LIST.name}).encode() + b"\n")
        answers: list[dict[str, Any]] = []
        probed = False
        while not probed or (request and not answers):
            message = self.read_line()
            if "method" in message:
                continue  # a subscription's notification
            if message.get("id") == probe:
                assert "result" in message, message
                probed = True
            else:
                answers.append(message)
        return answers


@pytest.fixture(scope="module")
def line(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Line]:
    daemon = DaemonProcess(tmp_path_factory.mktemp("rpcfuzz"))
    connection = Line(daemon.socket)
    yield connection
    connection.sock.close()

    async def second_client() -> t.SessionListResult:
        client = await daemon.client()
        try:
            return await client.request(SESSION_LIST, t.SessionListParams())
        finally:
            await client.close()

    assert isinstance(run(second_client()).sessions, list)
    code, err = daemon.terminate()
    assert code == 0, err
    assert "Traceback" not in err and "failed" not in err, err[-3000:]


def expected_id(frame: bytes) -> tuple[bool, object]:
    """Whether ``frame`` is a request (so it must be answered), and its id."""
    try:
        message = json.loads(frame)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return False, None
    id = message["id"]
    valid = isinstance(id, str) or (isinstance(id, int) and not isinstance(id, bool))
    return valid and message.get("jsonrpc") == "2.0", id


def check(line: Line, frame: bytes) -> None:
    assert b"\n" not in frame
    request, id = expected_id(frame)
    answers = line.exchange(frame, request)
    assert len(answers) <= 1, answers
    if request:
        assert len(answers) == 1, f"request {frame[:200]!r} got no answer"
        # A frame the daemon cannot decode (nested deeper than it decodes) is a parse
        # error, whose id is null as JSON-RPC has it: nothing of the frame was read.
        unread = answers[0].get("error", {}).get("data", {}).get("code") == FrameNotJson.code
        assert answers[0]["id"] == (None if unread else id), answers[0]
    for answer in answers:
        assert answer.get("jsonrpc") == "2.0"
        assert ("result" in answer) != ("error" in answer), answer
        if "error" in answer:
            error = answer["error"]
            assert isinstance(error["code"], int) and isinstance(error["message"], str)
            code = error["data"]["code"]
            assert isinstance(code, str) and code != InternalError.code, error
            # A storage error means hostile params got past validation into a key.
            assert not code.startswith("store:"), error
            TALLY[SURFACE][f"error {code}"] += 1
        else:
            TALLY[SURFACE]["result"] += 1
    if not answers:
        TALLY[SURFACE]["no answer (not a request)"] += 1


def request(id: object, method: object, params: object) -> bytes:
    frame = {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
    return json.dumps(frame, ensure_ascii=True).encode()


IDS = st.one_of(st.integers(), st.integers(min_value=2**63, max_value=10**400),
                st.integers(max_value=-(10**30)), st.text(max_size=300), st.floats(),
                st.booleans(), st.none(), JSON_VALUES)


@given(data=st.binary(max_size=400))
def test_arbitrary_bytes(line: Line, data: bytes) -> None:
    check(line, data.replace(b"\n", b" "))


@given(method=st.sampled_from(FUZZED), data=st.data(), cut=st.integers(0, 400),
       junk=st.binary(min_size=1, max_size=4).filter(lambda b: b"\n" not in b))
def test_invalid_utf8_inside_a_request(line: Line, method: str, data: st.DataObject,
                                       cut: int, junk: bytes) -> None:
    frame = request(1, method, data.draw(params_for(method)))
    cut = min(cut, len(frame))
    check(line, frame[:cut] + b"\xff" + junk + frame[cut:])


@given(depth=st.integers(1, 200_000), shape=st.sampled_from(("[", '{"a":')),
       wrap=st.booleans())
def test_deep_json(line: Line, depth: int, shape: str, wrap: bool) -> None:
    close = "]" if shape == "[" else "}"
    deep = shape * depth + "1" + close * depth
    text = ('{"jsonrpc":"2.0","id":7,"method":"session.list","params":{"x":' + deep + "}}"
            if wrap else deep)
    check(line, text.encode())


@given(id=IDS, method=st.sampled_from([*FUZZED, "", "nope", "session."]), data=st.data())
def test_ids_and_methods(line: Line, id: object, method: str, data: st.DataObject) -> None:
    check(line, request(id, method, data.draw(params_for(method)) if method in METHODS
                        else {}))


def aim(params: object, data: st.DataObject, known: list[str]) -> object:
    """``params`` with some of its ``*_id`` values replaced by ids the daemon knows."""
    if not isinstance(params, dict):
        return params
    return {key: data.draw(st.sampled_from(known)) if key.endswith("_id") and data.draw(
        st.booleans()) else value for key, value in params.items()}


@given(method=st.sampled_from(FUZZED), data=st.data())
def test_params_from_the_bindings(line: Line, method: str, data: st.DataObject) -> None:
    params = aim(data.draw(params_for(method)), data, line.known)
    check(line, request(data.draw(st.integers(0, 2**70)), method, params))


def test_oversized_frames_are_answered_and_dropped(line: Line) -> None:
    for size in (1 << 20, (1 << 20) + 1, 3 << 20):
        check(line, b"x" * size)
