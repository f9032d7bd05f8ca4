"""Every error treemail raises, each with a stable code.

Three families are kept apart, as the user must react to each differently:

* ``DefinitionError``: the caller built something invalid (a bad config, a bad agent doc,
  an illegal lifecycle step, a tool context that names no run). Fix the code or the input.
* ``Refusal``: the engine refused an operation a model or user asked for. The store is
  unchanged; a ``SendRefusal`` is what the sending model sees as its tool error.
* ``StorageError``: the store failed or holds data it cannot read.

A fourth root, ``ModelError``, is a failed model call: no one's fault in treemail, retried or
reported by the runtime's failure policy. ``ToolNote``s are never raised: they stand in for a
tool result the log does not hold (a call still waiting for approval, a run that died first).
A fifth, ``ProtocolError``, is a client that spoke the daemon's wire protocol wrongly (a bad
frame, an unknown method, no handshake): the ``rpc:`` codes, which only the daemon raises.
A sixth, ``ClientFailure``, is the daemon's client giving up on a call on its own side (no
answer in time, a frame over a limit): the ``client:`` codes, which never cross the wire.

Every code a model, a user or a plugin can see is declared here, and only here;
``spec/errors.json`` lists them all, and ``tests/unit/test_error_registry.py`` fails on a code
declared anywhere else. ``treemail.core.results`` turns any of them into a tool result or a
(code, message, data) triple; the daemon maps codes onto wire codes in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

__all__ = [
    "AgentDefinedByFile",
    "AgentDocError",
    "AnswerFailed",
    "AnswerTooLarge",
    "ApprovalPending",
    "ApprovalRequired",
    "ClearToken",
    "ClientFailure",
    "ClientTimeout",
    "ConfigError",
    "ConfigExists",
    "ConfigUnknownKey",
    "DataDirLocked",
    "DefinitionError",
    "DelegatingRunEnded",
    "DelegationDenied",
    "DelegationRefusal",
    "EngineShutdown",
    "ExternalBusy",
    "ExternalDaemonGone",
    "ExternalOnly",
    "ExternalScope",
    "FrameNotJson",
    "FrameNotUtf8",
    "FrameTooLarge",
    "IdempotencyConflict",
    "IllegalTransition",
    "InboxFull",
    "InflightFull",
    "InternalError",
    "InvalidArguments",
    "InvalidBody",
    "InvalidParams",
    "InvalidRequest",
    "InvalidToolArguments",
    "InvalidToolContext",
    "ListenFailed",
    "MaxHopsExceeded",
    "MessagingDisabled",
    "ModelError",
    "NotASubagent",
    "NotInitialized",
    "NotJsonRpc",
    "NotLoopback",
    "NotTreePeer",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "PluginBodyTooLarge",
    "PluginFailed",
    "PluginLoadError",
    "PluginRefusal",
    "ProducerKeyConflict",
    "ProtocolError",
    "Refusal",
    "RequestTooLarge",
    "ScriptExhausted",
    "SelfSend",
    "SendRefusal",
    "ServerUnproven",
    "SessionTokenRevoked",
    "SessionTokenUnknown",
    "SocketInUse",
    "SocketPathTaken",
    "StorageError",
    "StoreClosed",
    "StoreDamaged",
    "StoreDriverMissing",
    "StoreFormatUnknown",
    "StoreFull",
    "StoreLocked",
    "StoreMissing",
    "StoreNotPrivate",
    "StoreUrlUnknown",
    "TokenFileUnsafe",
    "TooManySubscriptions",
    "ToolFailed",
    "ToolInterrupted",
    "ToolNote",
    "TreemailError",
    "Unauthorized",
    "UnknownAgent",
    "UnknownApproval",
    "UnknownMethod",
    "UnknownSession",
    "UnknownSubagent",
    "UnknownSubagentReference",
    "UnknownTarget",
    "UnknownTool",
    "UnsupportedVersion",
]


class TreemailError(Exception):
    """Root of every error treemail raises."""

    code: ClassVar[str] = "treemail:error"

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details: Mapping[str, object] = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


# -- definition errors -------------------------------------------------------------------


class DefinitionError(TreemailError):
    """The caller supplied something invalid; fix the input or the calling code."""

    code = "treemail:definition"


class ConfigError(DefinitionError):
    """A config setting is mistyped or out of range, or the config file is not valid TOML."""

    code = "config:invalid"


class ConfigUnknownKey(ConfigError):
    """The config names a table or key treemail does not know (a typo, most often); the
    message suggests the nearest known name and ``details`` carry ``table``, ``key`` and
    ``suggestion``."""

    code = "config:unknown_key"


class ConfigExists(ConfigError):
    """``treemail init`` found a file it would write (``details``: ``paths``); it writes
    nothing over the user's files."""

    code = "config:exists"


# What an agent doc got wrong: the ``problem`` detail of every AgentDocError, stable like
# a code. One code for the whole family and a problem beside it: a caller that only needs
# "the doc is bad" matches the code; one that reacts to the cause matches the problem.
AGENT_DOC_PROBLEMS: Final = (
    "no_directory", "unreadable", "not_utf8", "duplicate_name",  # the docs directory
    "no_frontmatter", "unclosed_frontmatter", "too_large", "yaml_syntax", "bad_value",
    "alias", "too_deep", "bad_key", "duplicate_key", "not_mapping",  # the YAML
    "unknown_field", "bad_name", "bad_text",  # the fields
    "bad_permissions", "unknown_action", "bad_rules", "bad_label", "bad_rule_action",
    "unknown_label", "ask_not_allowed",  # the permissions
)


class AgentDocError(DefinitionError):
    """An agent doc is malformed; the message names the file and the field, and the
    ``problem`` detail names the cause, one of ``AGENT_DOC_PROBLEMS``: no_directory,
    unreadable, not_utf8, duplicate_name, no_frontmatter, unclosed_frontmatter, too_large,
    yaml_syntax, bad_value, alias, too_deep, bad_key, duplicate_key, not_mapping,
    unknown_field, bad_name, bad_text, bad_permissions, unknown_action, bad_rules, bad_label,
    bad_rule_action, unknown_label, ask_not_allowed."""

    code = "agent_doc:invalid"

    def __init__(self, message: str, *, problem: str, **details: object) -> None:
        if problem not in AGENT_DOC_PROBLEMS:
            raise ValueError(f"agent doc problem {problem!r} is not in AGENT_DOC_PROBLEMS")
        super().__init__(message, problem=problem, **details)


class IllegalTransition(DefinitionError):
    """A lifecycle event was fired in a state that does not allow it; nothing changed."""

    code = "lifecycle:illegal_transition"

    def __init__(self, subject: str, event: str, state: str, allowed: tuple[str, ...]) -> None:
        super().__init__(
            f"cannot {event} {subject} in state {state!r}; "
            f"from {state!r} only {', '.join(allowed) or 'no event'} is allowed",
            subject=subject,
            event=event,
            state=state,
            allowed=list(allowed),
        )
        self.subject = subject
        self.event = event
        self.state = state
        # The events the lifecycle table allows from ``state``, in the table's order.
        self.allowed = allowed


class InvalidToolContext(DefinitionError):
    """The executing tool context names no live run of the sender; the runtime is out of step."""

    code = "engine:invalid_tool_context"


class InvalidRequest(DefinitionError):
    """An engine call was malformed: empty mail, a discard without a reason, a bad scope."""

    code = "engine:invalid_request"


class UnknownTarget(DefinitionError):
    """An engine call named a session, run, request or message that does not exist."""

    code = "engine:unknown_target"


class PluginLoadError(DefinitionError):
    """A plugin spec or entry point could not be loaded; the message names it."""

    code = "plugin:load_failed"


class DataDirLocked(DefinitionError):
    """Another daemon holds this data directory; stop it or choose another --data-dir."""

    code = "daemon:data_dir_locked"


class AgentDefinedByFile(DefinitionError):
    """An agent doc sent to the daemon redefines an agent of the data directory's agents/
    files; edit that file, or register the doc under another name."""

    code = "daemon:agent_defined_by_file"


class StoreUrlUnknown(DefinitionError):
    """A store URL of a form treemail cannot open; the message lists the forms it accepts."""

    code = "store:unknown_url"


class StoreDriverMissing(DefinitionError):
    """The store URL names a backend whose driver is not installed; install the extra named."""

    code = "store:driver_missing"


class ListenFailed(DefinitionError):
    """The daemon could not bind its socket or TCP port (in use, or not permitted)."""

    code = "daemon:listen_failed"


class NotLoopback(DefinitionError):
    """``--tcp`` named an address that is not loopback; the TCP listener binds loopback only."""

    code = "daemon:not_loopback"


class TokenFileUnsafe(DefinitionError):
    """The TCP token file is not a private file of the daemon's user; delete it to renew."""

    code = "daemon:token_unsafe"


class SocketPathTaken(DefinitionError):
    """``--socket`` names something that is not a socket; the daemon leaves it alone."""

    code = "daemon:socket_path_taken"


class SocketInUse(DefinitionError):
    """Another daemon answers on the ``--socket`` path; stop it or choose another path."""

    code = "daemon:socket_in_use"


# -- refusals ----------------------------------------------------------------------------


class Refusal(TreemailError):
    """The engine refused the operation; the store is exactly as it was."""

    code = "treemail:refused"


class UnknownApproval(Refusal):
    """An approval answer named no pending approval (unknown, or already answered)."""

    code = "approval:unknown"


class UnknownTool(Refusal):
    """A model called a tool that is not on its surface (``steer_subagent`` among them)."""

    code = "tool:unknown"


class ToolFailed(Refusal):
    """A tool call failed on an unexpected error; nothing was changed, the run goes on."""

    code = "tool:failed"


class InvalidToolArguments(Refusal):
    """A delegation tool was called with a missing, mistyped or unknown argument."""

    code = "tool:invalid_arguments"


class PermissionDenied(Refusal):
    """The sender's permission rules deny this operation (the generic permission flow)."""

    code = "permission:denied"


class ApprovalRequired(Refusal):
    """An ``ask`` rule matched and no grant covers the operation; it awaits the user's answer."""

    code = "permission:approval_required"


class SendRefusal(Refusal):
    """A ``send_message`` tool call was refused; the code tells the model how to react."""

    code = "send_message:refused"


class MessagingDisabled(SendRefusal):
    """Messaging is switched off by ``[messaging] enabled = false``."""

    code = "send_message:disabled"


class InvalidArguments(SendRefusal):
    """The argument object is not exactly ``to``, ``body`` and an optional ``mode``."""

    code = "send_message:invalid_arguments"


class InvalidBody(SendRefusal):
    """The body is empty, whitespace only, not UTF-8 encodable, or over max_body_bytes."""

    code = "send_message:invalid_body"


class UnknownSession(SendRefusal):
    """A well-formed session UUID that names no session."""

    code = "send_message:unknown_session"


class NotTreePeer(SendRefusal):
    """A session UUID whose tree (root_session_id) differs from the sender's."""

    code = "send_message:not_tree_peer"


class UnknownSubagentReference(SendRefusal):
    """A handle that names no live peer of the sender's tree; the message lists the candidates."""

    code = "subagent:unknown_reference"


class IdempotencyConflict(SendRefusal):
    """The tool call id was already used by a send with other arguments; nothing was sent."""

    code = "send_message:idempotency_conflict"


class SelfSend(SendRefusal):
    """The sender addressed its own session."""

    code = "send_message:self_send"


class MaxHopsExceeded(SendRefusal):
    """The send would carry the chain past ``max_hops``."""

    code = "send_message:max_hops_exceeded"


class InboxFull(SendRefusal):
    """The recipient already holds ``max_pending_per_session`` pending agent messages."""

    code = "send_message:inbox_full"


class InflightFull(SendRefusal):
    """The sender already has ``max_inflight_per_pair`` unacknowledged messages to this peer."""

    code = "send_message:inflight_full"


class EngineShutdown(SendRefusal):
    """The send raced the engine's shutdown; nothing was accepted, retry after restart."""

    code = "send_message:engine_shutdown"


class DelegationRefusal(Refusal):
    """A delegation tool call (delegate_subagent, get_subagent_result, cancel_subagent) was
    refused; nothing changed, and the code tells the model how to react."""

    code = "delegation:refused"


class UnknownAgent(DelegationRefusal):
    """delegate_subagent named no known agent; the message lists the agents there are."""

    code = "delegation:unknown_agent"


class DelegationDenied(DelegationRefusal):
    """The caller's ``permissions.delegate`` rules do not allow delegating to that agent."""

    code = "delegation:denied"


class UnknownSubagent(DelegationRefusal):
    """The reference names no session at all; the message lists the caller's subagents."""

    code = "delegation:unknown_subagent"


class NotASubagent(DelegationRefusal):
    """The reference names a session that is not one of the caller's own subagents (another
    tree's, a sibling, a grandchild): the delegation tools reach only direct children."""

    code = "delegation:not_a_subagent"


class DelegatingRunEnded(DelegationRefusal):
    """The caller's run ended (finished or cancelled) before its delegate_subagent call took
    effect; no subagent was created."""

    code = "delegation:run_ended"


class PluginRefusal(Refusal):
    """A plugin refused a tool call; the model sees this code and the plugin's reason."""

    code = "plugin:refused"


class PluginBodyTooLarge(Refusal):
    """Plugin mail over the contract's 256 KiB cap; split it or send a reference instead."""

    code = "plugin:body_too_large"


class ProducerKeyConflict(Refusal):
    """An outside producer reused an idempotency key with other mail (text, mode or kind)."""

    code = "producer:idempotency_conflict"


class PluginFailed(Refusal):
    """A plugin's gate raised something other than a refusal; the call was refused."""

    code = "plugin:failed"


# -- notes standing in for a tool result --------------------------------------------------


class ToolNote(TreemailError):
    """Not raised: what a rebuilt conversation shows for a call whose result was not logged."""

    code = "tool:note"


class ApprovalPending(ToolNote):
    """The call is held until the user answers its approval request; its outcome follows."""

    code = "permission:approval_pending"


class ToolInterrupted(ToolNote):
    """The run ended before the call returned; its effect is unknown, check before repeating."""

    code = "tool:interrupted"


# -- model calls ---------------------------------------------------------------------------


class ModelError(TreemailError):
    """A model call failed: unreachable, timed out, refused, or answered something unreadable.

    ``details`` carry ``status`` (HTTP status or None) and ``body`` (an excerpt) when known.
    """

    code = "model:error"


class ScriptExhausted(ModelError):
    """A ``ScriptedModel`` was asked for more replies than its script holds."""

    code = "model:script_exhausted"


# -- storage -----------------------------------------------------------------------------


class StorageError(TreemailError):
    """The store failed, or holds a record it cannot decode."""

    code = "store:failure"


class StoreClosed(StorageError):
    """The store was closed; open it again to use it."""

    code = "store:closed"


class StoreDamaged(StorageError):
    """A store file or record failed validation; restore it from a copy or run verify."""

    code = "store:damaged"


class StoreLocked(StorageError):
    """Another process holds the store open for writing; stop it, or open read-only."""

    code = "store:locked"


class StoreMissing(StorageError):
    """There is no store at the path given; check the path."""

    code = "store:missing"


class StoreNotPrivate(StorageError):
    """A store or data directory is another user's, or open to others and not treemail's
    to repair (or on a file system without modes); the message names the path and the fix."""

    code = "store:not_private"


class StoreFormatUnknown(StorageError):
    """The store was written in a format this treemail does not read; the message says how."""

    code = "store:unknown_format"


class StoreFull(StorageError):
    """The disk or the store's map is full; nothing of the operation was stored."""

    code = "store:full"


class OutcomeUnknown(StorageError):
    """An I/O error came after the commit point: retry with the same tool-call id."""

    code = "store:outcome_unknown"


# -- the daemon's client --------------------------------------------------------------------


class ClientFailure(TreemailError):
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


# -- the wire (protocol 19) -----------------------------------------------------------------


class ProtocolError(TreemailError):
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


class SessionTokenUnknown(Unauthorized):
    """A session token names no external session of this daemon: mistyped, cut short, or
    issued by another data directory. Ask the user for the token ``treemail attach`` printed."""

    code = "external:unknown_token"


class SessionTokenRevoked(Unauthorized):
    """The session token was revoked (``treemail tokens revoke``); it binds no one any more.
    A new one comes from ``treemail tokens issue``."""

    code = "external:token_revoked"


class ExternalScope(ProtocolError):
    """A connection bound to one external session asked for something outside that session
    (another session, the user's methods), or an unbound one asked for a bound one's method."""

    code = "external:out_of_scope"


class ExternalBusy(Refusal):
    """Another connection holds this external session's mail, claimed by its check_mail and
    not yet consumed; it is released when that connection ends."""

    code = "external:busy"


class ExternalOnly(Refusal):
    """A token was asked for a session an actor hosts: only external sessions take tokens."""

    code = "external:not_external"


class ExternalDaemonGone(ClientFailure):
    """``treemail mcp`` lost its daemon (stopped, restarting): the tool call is answered with
    this, and the next call connects again."""

    code = "client:daemon_gone"


class ServerUnproven(Unauthorized):
    """A TCP listener did not prove it holds the token; the client sent it nothing secret.

    The one code raised by the client, not the daemon: the handshake proves both sides."""

    code = "client:server_unproven"
