"""The daemon's own errors: its data directory, its listeners, and its client's give-ups.

Each class registers into the one registry of ``treemail.core.errors`` (which names no daemon
option: these do), so ``spec/errors.json`` lists them with the core's. A ``client:`` code
never crosses the wire: the client raises it on its own side. ``rpc:`` codes, the wire's, are
``treemail.protocol.rpc_errors``'s.
"""

from __future__ import annotations

from treemail.core import errors
from treemail.protocol.rpc_errors import ProtocolError, Unauthorized

__all__ = [
    "AgentDefinedByFile",
    "AnswerMalformed",
    "AnswerTooLarge",
    "ClientFailure",
    "ClientTimeout",
    "DataDirLocked",
    "ExternalDaemonGone",
    "ExternalScope",
    "ListenFailed",
    "NotLoopback",
    "NotOwner",
    "RequestTooLarge",
    "ServerUnproven",
    "SocketInUse",
    "SocketPathTaken",
    "TokenFileUnsafe",
]

errors.declare(__name__)


# -- the daemon ------------------------------------------------------------------------


class DataDirLocked(errors.DefinitionError):
    """Another daemon holds this data directory; stop it or choose another --data-dir."""

    code = "daemon:data_dir_locked"


class NotOwner(errors.DefinitionError):
    """Another daemon owns this tree (or is where a new tree is placed); send the request to
    the daemon ``details["owner"]`` names."""

    code = "daemon:not_owner"


class AgentDefinedByFile(errors.DefinitionError):
    """An agent doc sent to the daemon redefines an agent of the data directory's agents/
    files; edit that file, or register the doc under another name."""

    code = "daemon:agent_defined_by_file"


class ListenFailed(errors.DefinitionError):
    """The daemon could not bind its socket or TCP port (in use, or not permitted)."""

    code = "daemon:listen_failed"


class NotLoopback(errors.DefinitionError):
    """``--tcp`` named an address that is not loopback; the TCP listener binds loopback only."""

    code = "daemon:not_loopback"


class TokenFileUnsafe(errors.DefinitionError):
    """The TCP token file is not a private file of the daemon's user; delete it to renew."""

    code = "daemon:token_unsafe"


class SocketPathTaken(errors.DefinitionError):
    """``--socket`` names something that is not a socket; the daemon leaves it alone."""

    code = "daemon:socket_path_taken"


class SocketInUse(errors.DefinitionError):
    """Another daemon answers on the ``--socket`` path; stop it or choose another path."""

    code = "daemon:socket_in_use"


# -- the daemon's client ---------------------------------------------------------------


class ClientFailure(errors.TreemailError):
    """The daemon's client gave up on a call on its own side; the message says why."""

    code = "client:error"


class ClientTimeout(ClientFailure):
    """No answer came within the call's timeout (the daemon is stopped, hung or overloaded);
    the call may or may not have taken effect."""

    code = "client:timeout"


class RequestTooLarge(ClientFailure):
    """The request's frame is over the daemon's frame limit; it was not sent (or the daemon
    dropped it unread): nothing was done. Send less in one request."""

    code = "client:request_too_large"


class AnswerTooLarge(ClientFailure):
    """The daemon's answer was over the client's frame limit and was dropped; the call may
    have taken effect. Ask for less (a smaller page), or raise the client's limit."""

    code = "client:answer_too_large"


class ServerUnproven(Unauthorized):
    """A TCP listener did not prove it holds the token; the client sent it nothing secret.

    The one code raised by the client, not the daemon: the handshake proves both sides."""

    code = "client:server_unproven"


class AnswerMalformed(ClientFailure):
    """The daemon's answer does not decode into the method's result type (a daemon of
    another version, or a bug); the call may have taken effect. Read the state back."""

    code = "client:answer_malformed"


class ExternalScope(ProtocolError):
    """A connection bound to one external session asked for something outside that session
    (another session, the user's methods), or an unbound one asked for a bound one's method."""

    code = "external:out_of_scope"


class ExternalDaemonGone(ClientFailure):
    """``treemail mcp`` lost its daemon (stopped, restarting): the tool call is answered with
    this, and the next call connects again."""

    code = "client:daemon_gone"
