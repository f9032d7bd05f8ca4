"""The one mapping from treemail errors to JSON-RPC error objects.

The JSON-RPC ``code`` says which family an error belongs to, so a generic client can react
(retry an overload, fix its params, give up on a refusal); ``data.code`` is treemail's stable
code (``send_message:inbox_full`` ...), what a client that knows treemail branches on.
"""

from __future__ import annotations

from typing import Final

from treemail.core.errors import DefinitionError, Refusal, StorageError, TreemailError
from treemail.protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ErrorData,
    RpcError,
)

__all__ = [
    "OVERLOADED",
    "REFUSED",
    "WIRE_CODES",
    "invalid_params",
    "invalid_request",
    "method_not_found",
    "not_initialized",
    "overloaded",
    "rpc_error",
    "unexpected",
    "unsupported_version",
]

OVERLOADED: Final = -32001
NOT_INITIALIZED: Final = -32002
UNSUPPORTED_VERSION: Final = -32003
REFUSED: Final = -32010
INVALID: Final = -32011
STORAGE: Final = -32012
FAILED: Final = -32013

# Most specific family first: a class is matched by the first entry it is a subclass of.
_FAMILIES: Final[tuple[tuple[type[TreemailError], int], ...]] = (
    (Refusal, REFUSED),
    (DefinitionError, INVALID),
    (StorageError, STORAGE),
    (TreemailError, FAILED),
)

WIRE_CODES: Final[dict[int, str]] = {
    -32700: "parse error: the frame is not UTF-8 JSON",
    INVALID_REQUEST: "invalid request: not a JSON-RPC 2.0 message, or a frame over the limit",
    METHOD_NOT_FOUND: "unknown method",
    INVALID_PARAMS: "invalid params: the params do not match the method's schema",
    INTERNAL_ERROR: "internal error: a daemon bug; the message says what failed",
    OVERLOADED: "overloaded: too many requests in flight on this connection; retry later",
    NOT_INITIALIZED: "not initialized: send initialize first",
    UNSUPPORTED_VERSION: "unsupported protocol version",
    REFUSED: "refused: treemail refused the operation; the store is unchanged",
    INVALID: "invalid: the operation names something that does not exist or is malformed",
    STORAGE: "storage: the store failed",
    FAILED: "failed: another treemail error",
}


def rpc_error(error: TreemailError) -> RpcError:
    """The error object for a treemail error: its family's code and its stable code."""
    code = next(code for family, code in _FAMILIES if isinstance(error, family))
    details = {key: _plain(value) for key, value in error.details.items()}
    return RpcError(code=code, message=error.message,
                    data=ErrorData(code=error.code, details=details))


def _plain(value: object) -> object:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _wire(code: int, stable: str, message: str) -> RpcError:
    return RpcError(code=code, message=message, data=ErrorData(code=stable))


def overloaded(limit: int) -> RpcError:
    return _wire(OVERLOADED, "rpc:overloaded",
                 f"{limit} requests are already in flight on this connection; "
                 "wait for answers before sending more")


def not_initialized(method: str) -> RpcError:
    return _wire(NOT_INITIALIZED, "rpc:not_initialized",
                 f"{method} before initialize: send initialize first")


def unsupported_version(asked: int, supported: int) -> RpcError:
    return _wire(UNSUPPORTED_VERSION, "rpc:unsupported_version",
                 f"protocol version {asked} is not supported; this daemon speaks "
                 f"protocol_version {supported}")


def method_not_found(method: str) -> RpcError:
    return _wire(METHOD_NOT_FOUND, "rpc:method_not_found",
                 f"no method {method!r}; see spec/bindings for the methods of this protocol")


def invalid_params(method: str, problem: str) -> RpcError:
    return _wire(INVALID_PARAMS, "rpc:invalid_params", f"{method}: {problem}")


def invalid_request(stable: str, message: str) -> RpcError:
    return _wire(INVALID_REQUEST, stable, message)


def unexpected(method: str, exc: BaseException) -> RpcError:
    return _wire(INTERNAL_ERROR, "rpc:internal",
                 f"{method} failed inside the daemon ({type(exc).__name__}: {exc}); "
                 "this is a bug, please report it")
