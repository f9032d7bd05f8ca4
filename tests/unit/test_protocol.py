"""The pure wire layer: frames, JSON-RPC decoding, and the one error mapping."""

from __future__ import annotations

import pytest

from treemail import spec_tables
from treemail.core import errors as core
from treemail.protocol import errors
from treemail.protocol import rpc_errors as rpc
from treemail.protocol.framing import HEAD, FrameSplitter, Oversized
from treemail.protocol.jsonrpc import Failure, Notification, Reply, Request, decode_frame
from treemail.protocol.rpc_errors import FrameNotJson, FrameNotUtf8, NotJsonRpc


def test_frames_split_on_newlines_across_chunks() -> None:
    splitter = FrameSplitter(limit=10)
    assert splitter.feed(b'{"a"') == []
    assert splitter.feed(b':1}\n{"b":2}\r\n\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert splitter.end() == [b'{"c"']


def test_an_oversized_line_is_dropped_not_buffered() -> None:
    splitter = FrameSplitter(limit=4)
    assert splitter.feed(b"abc") == []
    assert splitter.feed(b"defgh") == []
    assert splitter._buffer == bytearray()  # nothing of it is kept once over the limit
    # The head, what it read before the line passed the limit, is all it keeps of it.
    assert splitter.feed(b"ij\nok\n") == [Oversized(10, b"abcdefgh"), b"ok"]


def test_an_oversized_line_keeps_at_most_its_head() -> None:
    splitter = FrameSplitter(limit=4)
    line = b"x" * (HEAD * 3)
    assert splitter.feed(line + b"\n") == [Oversized(len(line), line[:HEAD])]


def test_a_line_at_the_limit_is_a_frame() -> None:
    assert FrameSplitter(limit=4).feed(b"abcd\n") == [b"abcd"]


def test_decoding_sorts_requests_notifications_and_replies() -> None:
    assert decode_frame(b'{"jsonrpc":"2.0","id":3,"method":"m","params":{"a":1}}') == \
        Request(3, "m", {"a": 1})
    assert decode_frame(b'{"jsonrpc":"2.0","method":"m"}') == Notification("m", {})
    assert decode_frame(b'{"jsonrpc":"2.0","id":"s1","result":{"ok":true}}') == \
        Reply("s1", result={"ok": True})


@pytest.mark.parametrize(("frame", "code", "stable", "id"), [
    (b"{", -32700, FrameNotJson.code, None),
    (b'"\xc3\x28"', -32700, FrameNotUtf8.code, None),
    (b"3", -32600, NotJsonRpc.code, None),
    (b'{"jsonrpc":"1.0","id":4,"method":"m"}', -32600, NotJsonRpc.code, 4),
    (b'{"jsonrpc":"2.0","id":true,"method":"m"}', -32600, NotJsonRpc.code, None),
    (b'{"jsonrpc":"2.0","id":5,"method":""}', -32600, NotJsonRpc.code, 5),
    (b'{"jsonrpc":"2.0","id":6,"method":"m","params":[1]}', -32600, NotJsonRpc.code, 6),
    (b'{"jsonrpc":"2.0","id":7}', -32600, NotJsonRpc.code, 7),
    (b'{"jsonrpc":"2.0","id":8,"result":1,"error":{"code":1,"message":"x"}}', -32600,
     NotJsonRpc.code, 8),
])
def test_bad_frames_become_failures_with_the_id_when_readable(
    frame: bytes, code: int, stable: str, id: object
) -> None:
    decoded = decode_frame(frame)
    assert isinstance(decoded, Failure)
    assert decoded.id == id
    assert decoded.error.code == code and decoded.error.data is not None
    assert decoded.error.data.code == stable


@pytest.mark.parametrize(("error", "code"), [
    (core.InboxFull("full"), -32010),
    (core.EngineShutdown("stopping"), -32010),
    (core.PermissionDenied("no"), -32010),
    (core.UnknownTarget("no session x"), -32011),
    (core.ConfigError("bad"), -32011),
    (core.StorageError("disk"), -32012),
    (core.TreemailError("other"), -32013),
])
def test_every_treemail_error_maps_to_its_family_with_its_stable_code(
    error: core.TreemailError, code: int
) -> None:
    mapped = errors.rpc_error(error)
    assert mapped.code == code
    assert mapped.data is not None and mapped.data.code == error.code
    assert mapped.message == error.message


def test_error_details_travel_as_plain_json() -> None:
    mapped = errors.rpc_error(core.InvalidRequest("x", keys=("a", "b"), n=1, obj=object()))
    assert mapped.data is not None
    assert mapped.data.details["keys"] == ["a", "b"] and mapped.data.details["n"] == 1
    assert isinstance(mapped.data.details["obj"], str)


def test_every_registered_code_maps_to_a_documented_wire_code() -> None:
    for row in spec_tables.errors_table()["errors"]:
        assert row["jsonrpc_code"] in errors.WIRE_CODES, row["code"]


@pytest.mark.parametrize(("error", "code"), [
    (rpc.FrameNotJson("x"), -32700),
    (rpc.FrameNotUtf8("x"), -32700),
    (rpc.NotJsonRpc("x"), -32600),
    (rpc.FrameTooLarge("x"), -32600),
    (rpc.UnknownMethod("x"), -32601),
    (rpc.InvalidParams("x"), -32602),
    (rpc.InternalError("x"), -32603),
    (rpc.Overloaded("x"), -32001),
    (rpc.NotInitialized("x"), -32002),
    (rpc.UnsupportedVersion("x"), -32003),
    (rpc.Unauthorized("x"), -32004),
])
def test_the_wire_codes_are_registry_classes_on_the_standard_codes(
    error: rpc.ProtocolError, code: int
) -> None:
    mapped = errors.rpc_error(error)
    assert mapped.code == code
    assert mapped.data is not None and mapped.data.code == error.code
    assert error.code.startswith("rpc:")


@pytest.mark.parametrize("deep", [b"[" * 100_000, b'{"a":' * 5_000 + b"1" + b"}" * 5_000])
def test_json_nested_past_the_recursion_limit_is_a_parse_error(deep: bytes) -> None:
    # It used to raise RecursionError out of decode_frame, closing the daemon's connection.
    failure = decode_frame(deep)
    assert isinstance(failure, Failure) and failure.id is None
    assert failure.error.data is not None and failure.error.data.code == rpc.FrameNotJson.code
