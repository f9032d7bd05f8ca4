"""Protocol 19's connection types: the TCP proof (``auth.challenge``, ``auth.prove``), the
``initialize`` handshake and ``shutdown``'s result. ``treemail.protocol.types`` re-exports them.
"""

from __future__ import annotations

import msgspec

from treemail.protocol.rules import Hex32
from treemail.protocol.structs import Params, Result

__all__ = [
    "AuthChallengeParams",
    "AuthChallengeResult",
    "AuthProveParams",
    "AuthProveResult",
    "ClientCapabilities",
    "ClientInfo",
    "InitializeParams",
    "InitializeResult",
    "ServerCapabilities",
    "ServerInfo",
    "ShutdownResult",
]


# -- initialize --------------------------------------------------------------------------


class ClientInfo(Params):
    name: str
    version: str = ""


class ClientCapabilities(Params):
    """What the client takes part in. A plugin connection asks for ``plugin/event``
    notifications (every durable event) and/or to gate tool calls (``plugin/tool_before_call``
    requests from the server, answered before the call runs)."""

    plugin_events: bool = False
    tool_gate: bool = False


class InitializeParams(Params):
    """``auth_token``: no longer taken. The token never crosses the wire: a TCP connection
    proves it holds it with ``auth.challenge`` and ``auth.prove`` first; on TCP an
    ``auth_token`` is refused (``rpc:token_in_clear``), the Unix socket and stdio ignore it."""

    protocol_version: int
    client_info: ClientInfo
    capabilities: ClientCapabilities = msgspec.field(default_factory=ClientCapabilities)
    auth_token: str | None = None


# -- authentication over TCP (spec/protocol.md, section 2) --------------------------------


class AuthChallengeParams(Params):
    """A TCP connection's first request: the client's fresh random nonce."""

    client_nonce: Hex32


class AuthChallengeResult(Result):
    """The daemon's fresh nonce, and its proof that it holds the token:
    HMAC-SHA256(token, "treemail-server" | client_nonce | server_nonce)."""

    server_nonce: Hex32
    server_proof: Hex32


class AuthProveParams(Params):
    """Sent only once the server's proof checked out:
    HMAC-SHA256(token, "treemail-client" | server_nonce | client_nonce)."""

    client_proof: Hex32


class AuthProveResult(Result):
    authenticated: bool


class ServerInfo(Result):
    name: str
    version: str


class ServerCapabilities(Result):
    methods: list[str]
    notifications: list[str]
    max_frame_bytes: int
    max_in_flight: int
    plugin_body_max_bytes: int


class InitializeResult(Result):
    protocol_version: int
    server_info: ServerInfo
    capabilities: ServerCapabilities


class ShutdownResult(Result):
    shutting_down: bool
