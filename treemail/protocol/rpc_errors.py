"""The wire's errors (protocol 19): a client that spoke the protocol wrongly, the ``rpc:`` codes.

Only the daemon raises them (the client reads them back from error objects). They register
into the one registry of ``treemail.core.errors``; ``treemail.protocol.errors`` maps every
registered error onto its JSON-RPC code.
"""

from __future__ import annotations

from treemail.core import errors

__all__ = [
    "AnswerFailed",
    "ClearToken",
    "FrameNotJson",
    "FrameNotUtf8",
    "FrameTooLarge",
    "InternalError",
    "InvalidParams",
    "NotInitialized",
    "NotJsonRpc",
    "Overloaded",
    "ProtocolError",
    "TooManySubscriptions",
    "Unauthorized",
    "UnknownMethod",
    "UnsupportedVersion",
]

errors.declare(__name__)


# -- the wire (protocol 19) ------------------------------------------------------------


class ProtocolError(errors.TreemailError):
    """A client spoke the daemon's protocol wrongly; fix the client (nothing was done)."""

    code = "rpc:error"


class FrameNotUtf8(ProtocolError):
    """A frame was not UTF-8; send one UTF-8 JSON object per line."""

    code = "rpc:invalid_utf8"


class FrameNotJson(ProtocolError):
    """A frame was not JSON; send one JSON object per line."""

    code = "rpc:parse_error"


class NotJsonRpc(ProtocolError):
    """A frame was JSON but not a JSON-RPC 2.0 request, notification or response."""

    code = "rpc:invalid_request"


class FrameTooLarge(ProtocolError):
    """A frame was over the daemon's size limit and was dropped unread; send smaller frames."""

    code = "rpc:frame_too_large"


class UnknownMethod(ProtocolError):
    """No method of that name in this protocol; spec/bindings lists them."""

    code = "rpc:method_not_found"


class InvalidParams(ProtocolError):
    """The params do not match the method's schema; the message names the field."""

    code = "rpc:invalid_params"


class NotInitialized(ProtocolError):
    """A request came before ``initialize``; send initialize first."""

    code = "rpc:not_initialized"


class UnsupportedVersion(ProtocolError):
    """The client asked for a protocol version this daemon does not speak."""

    code = "rpc:unsupported_version"


class Unauthorized(ProtocolError):
    """A TCP client did not prove it holds the daemon's token, or the proof was wrong."""

    code = "rpc:unauthorized"


class ClearToken(Unauthorized):
    """A TCP client sent the token itself (``auth_token``); it must prove it instead."""

    code = "rpc:token_in_clear"


class Overloaded(ProtocolError):
    """Too many requests are in flight on the connection; wait for answers, then retry."""

    code = "rpc:overloaded"


class AnswerFailed(ProtocolError):
    """A request was carried out but its answer could not be encoded; read the state back."""

    code = "rpc:answer_failed"


class TooManySubscriptions(ProtocolError):
    """The connection has as many subscriptions as it may; unsubscribe one, then retry."""

    code = "rpc:too_many_subscriptions"


class InternalError(ProtocolError):
    """The daemon failed while serving a request: a bug; the message says what failed."""

    code = "rpc:internal"
