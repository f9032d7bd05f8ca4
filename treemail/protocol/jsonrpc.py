"""JSON-RPC 2.0 framing, sans I/O: one newline-delimited frame in, one decoded message out.

A frame is the bytes of one line without its newline. ``decode_frame`` never raises: a frame
that is not a JSON-RPC message becomes a ``Failure`` carrying the error to answer with, and
the id when one could be read, so the connection goes on serving its next frame.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from treemail.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorData,
    RpcError,
    rpc_error,
)
from treemail.protocol.methods import Method
from treemail.protocol.rpc_errors import FrameNotJson, FrameNotUtf8, NotJsonRpc, ProtocolError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "ErrorData",
    "Failure",
    "Incoming",
    "Notification",
    "Reply",
    "Request",
    "RequestId",
    "RpcError",
    "decode_frame",
    "encode_error",
    "encode_notice",
    "encode_notification",
    "encode_request",
    "encode_result",
]

RequestId = int | str


class Request(msgspec.Struct, frozen=True):
    id: RequestId
    method: str
    params: Any


class Notification(msgspec.Struct, frozen=True):
    method: str
    params: Any


class Reply(msgspec.Struct, frozen=True):
    """A response to a request the other side made (the server asks plugins, for one)."""

    id: RequestId
    result: Any = None
    error: RpcError | None = None


class Failure(msgspec.Struct, frozen=True):
    """A frame that is not a valid message: answer ``error`` to ``id`` (None when unknown)."""

    id: RequestId | None
    error: RpcError


Incoming = Request | Notification | Reply | Failure


def _failure(error: ProtocolError, id: RequestId | None = None) -> Failure:
    return Failure(id, rpc_error(error))


def decode_frame(frame: bytes) -> Incoming:
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _failure(FrameNotUtf8(
            f"frame is not UTF-8 ({exc.reason} at byte {exc.start}); "
            "send one UTF-8 JSON object per line"))
    try:
        message = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        return _failure(FrameNotJson(
            f"frame is not JSON ({exc}); send one JSON object per line"))
    except RecursionError:
        # The decoder recurses per nesting level; a frame nested past the interpreter's
        # limit must not take the connection down with it.
        return _failure(FrameNotJson("frame nests JSON too deeply to decode; flatten it"))
    return _classify(message)


def _classify(message: object) -> Incoming:
    if not isinstance(message, dict):
        return _failure(NotJsonRpc("a JSON-RPC message is a JSON object"))
    raw_id = message.get("id")
    id = raw_id if _valid_id(raw_id) else None
    if message.get("jsonrpc") != "2.0":
        return _failure(NotJsonRpc('the message must carry "jsonrpc": "2.0"'), id)
    if "method" not in message:
        return _reply(message, id)
    if "id" in message and not _valid_id(raw_id):
        return _failure(NotJsonRpc("id must be an integer or a string"))
    method, params = message.get("method"), message.get("params", {})
    if not isinstance(method, str) or not method:
        return _failure(NotJsonRpc("method must be a non-empty string"), id)
    if not isinstance(params, dict):
        return _failure(NotJsonRpc("params must be a JSON object (by-name parameters)"), id)
    if id is None:
        return Notification(method, params)
    return Request(id, method, params)


def _reply(message: dict[str, Any], id: RequestId | None) -> Incoming:
    """A response. An error answer may have a null id: the answer to an unreadable frame."""
    if ("result" in message) == ("error" in message) or (id is None and "result" in message):
        return _failure(NotJsonRpc("a message without a method is a response: an id and "
                                   "exactly one of result and error"), id)
    if "result" in message and id is not None:
        return Reply(id, result=message["result"])
    try:
        error = msgspec.convert(message["error"], RpcError)
    except msgspec.ValidationError as exc:
        return _failure(NotJsonRpc(f"error object is malformed: {exc}"), id)
    return Reply(id, error=error) if id is not None else Failure(None, error)


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


_encoder = msgspec.json.Encoder()


def encode_result(id: RequestId, result: object) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": id, "result": result}) + b"\n"


def encode_error(id: RequestId | None, error: RpcError) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": id, "error": error}) + b"\n"


def encode_notification(method: str, params: object) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "method": method, "params": params}) + b"\n"


P = TypeVar("P", bound=msgspec.Struct)


def encode_notice(method: Method[P, Any], params: P) -> bytes:
    """A notification of one of the ``NOTIFICATIONS`` constants, its params typed by it."""
    return encode_notification(method.name, params)


def encode_request(id: RequestId, method: str, params: object) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": id, "method": method,
                            "params": params}) + b"\n"
