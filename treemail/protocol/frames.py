"""The four JSON-RPC 2.0 frames of protocol 19, as types: for the bindings, not the codec.

``jsonrpc.decode_frame`` reads frames leniently enough to answer a malformed one with an
error; these types state what a well-formed frame is, so clients get it as a schema and as
TypeScript. The bindings type each method's ``params`` and ``result`` from the method table.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from treemail.protocol.errors import RpcError

__all__ = ["FRAMES", "ErrorResponse", "NotificationFrame", "RequestFrame", "ResponseFrame"]

Version = Literal["2.0"]


class RequestFrame(msgspec.Struct, kw_only=True):
    """A request: answered with a response or an error response of the same ``id``. Params
    are by name; omitted, they are ``{}``."""

    jsonrpc: Version
    id: int | str
    method: str
    params: dict[str, Any] = {}


class ResponseFrame(msgspec.Struct, kw_only=True):
    """A request's result."""

    jsonrpc: Version
    id: int | str
    result: Any


class ErrorResponse(msgspec.Struct, kw_only=True):
    """A request's error; ``id`` is null when the request's id could not be read."""

    jsonrpc: Version
    id: int | str | None
    error: RpcError


class NotificationFrame(msgspec.Struct, kw_only=True):
    """A message without an ``id``: never answered."""

    jsonrpc: Version
    method: str
    params: dict[str, Any] = {}


FRAMES: tuple[type[msgspec.Struct], ...] = (RequestFrame, ResponseFrame, ErrorResponse,
                                            NotificationFrame)
