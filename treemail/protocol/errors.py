"""The one mapping from treemail errors to JSON-RPC error objects.

The JSON-RPC ``code`` says which family an error belongs to, so a generic client can react
(retry an overload, fix its params, give up on a refusal); ``data.code`` is treemail's stable
code (``send_message:inbox_full``, ``rpc:overloaded`` ...), what a client that knows treemail
branches on. Every stable code is a class of the registry (``treemail.core.errors``), the
wire's own ``rpc:`` codes included, and reaches the wire only through ``rpc_error``;
``spec/errors.json`` lists each code's JSON-RPC code, from ``jsonrpc_code``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from treemail.core import errors as e
from treemail.protocol import rpc_errors as rpc

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "OVERLOADED",
    "PARSE_ERROR",
    "REFUSED",
    "WIRE_CODES",
    "ErrorData",
    "RpcError",
    "jsonrpc_code",
    "registered",
    "rpc_error",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
OVERLOADED: Final = -32001
NOT_INITIALIZED: Final = -32002
UNSUPPORTED_VERSION: Final = -32003
UNAUTHORIZED: Final = -32004
REFUSED: Final = -32010
INVALID: Final = -32011
STORAGE: Final = -32012
FAILED: Final = -32013


class ErrorData(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a client branches on: treemail's stable error code, and the error's details."""

    code: str
    details: dict[str, Any] = {}


class RpcError(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A JSON-RPC error object; ``data.code`` is the stable treemail code."""

    code: int
    message: str
    data: ErrorData | None = None


# Most specific first: a class takes the code of the first entry it is a subclass of.
_MAPPING: Final[tuple[tuple[type[e.TreemailError], int], ...]] = (
    (rpc.FrameNotUtf8, PARSE_ERROR),
    (rpc.FrameNotJson, PARSE_ERROR),
    (rpc.NotJsonRpc, INVALID_REQUEST),
    (rpc.FrameTooLarge, INVALID_REQUEST),
    (rpc.UnknownMethod, METHOD_NOT_FOUND),
    (rpc.InvalidParams, INVALID_PARAMS),
    (rpc.InternalError, INTERNAL_ERROR),
    (rpc.AnswerFailed, INTERNAL_ERROR),
    (rpc.Overloaded, OVERLOADED),
    (rpc.TooManySubscriptions, OVERLOADED),
    (rpc.NotInitialized, NOT_INITIALIZED),
    (rpc.UnsupportedVersion, UNSUPPORTED_VERSION),
    (rpc.Unauthorized, UNAUTHORIZED),
    # A session token that binds no one: refused as any failed proof of identity is.
    (e.SessionTokenUnknown, UNAUTHORIZED),
    (e.SessionTokenRevoked, UNAUTHORIZED),
    (rpc.ProtocolError, INVALID_REQUEST),
    (e.Refusal, REFUSED),
    (e.DefinitionError, INVALID),
    (e.StorageError, STORAGE),
    (e.TreemailError, FAILED),
)

WIRE_CODES: Final[dict[int, str]] = {
    PARSE_ERROR: "parse error: the frame is not UTF-8 JSON",
    INVALID_REQUEST: "invalid request: not a JSON-RPC 2.0 message, or a frame over the limit",
    METHOD_NOT_FOUND: "unknown method",
    INVALID_PARAMS: "invalid params: the params do not match the method's schema",
    INTERNAL_ERROR: "internal error: a daemon bug; the message says what failed",
    OVERLOADED: "overloaded: too many requests in flight on this connection; retry later",
    NOT_INITIALIZED: "not initialized: send initialize first",
    UNSUPPORTED_VERSION: "unsupported protocol version",
    UNAUTHORIZED: "unauthorized: a TCP connection must prove it holds the daemon's token",
    REFUSED: "refused: treemail refused the operation; the store is unchanged",
    INVALID: "invalid: the operation names something that does not exist or is malformed",
    STORAGE: "storage: the store failed",
    FAILED: "failed: another treemail error",
}


def registered() -> list[type[e.TreemailError]]:
    """Every error class of the registry: the core's and each layer's that registered (the
    wire's own ``rpc:`` codes always; the daemon's, the store's and the model's once their
    modules are imported, as the bindings' writer and ``spec_tables`` do)."""
    from treemail.protocol import rpc_errors  # noqa: F401 - registers the wire's codes

    return e.registry()


def jsonrpc_code(cls: type[e.TreemailError]) -> int:
    """The JSON-RPC code of an error class: its entry in the one mapping."""
    return next(code for family, code in _MAPPING if issubclass(cls, family))


def rpc_error(error: e.TreemailError) -> RpcError:
    """The error object for a treemail error: its JSON-RPC code and its stable code."""
    details = {key: _plain(value) for key, value in error.details.items()}
    return RpcError(code=jsonrpc_code(type(error)), message=error.message,
                    data=ErrorData(code=error.code, details=details))


def _plain(value: object) -> object:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)
