"""Protocol 19: the daemon's JSON-RPC wire, pure (no I/O): framing, methods, the error
mapping and the bindings export. Imports the core only."""

from treemail.protocol.methods import METHODS, NOTIFICATIONS, PROTOCOL_VERSION, SERVER_REQUESTS

__all__ = ["METHODS", "NOTIFICATIONS", "PROTOCOL_VERSION", "SERVER_REQUESTS"]
