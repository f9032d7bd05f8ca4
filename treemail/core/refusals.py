"""The core's refusals: the engine refused an operation a model or user asked for, and the
store is unchanged. A ``SendRefusal`` is what the sending model sees as its tool error; the
delegation, plugin and external-session refusals each have their own family or code.
Registered with the one registry (``treemail.core.error_registry``); ``treemail.core.errors``
re-exports them all.
"""

from __future__ import annotations

from treemail.core.error_registry import TreemailError, declare

__all__ = [
    "ApprovalRequired",
    "CancelTooLate",
    "DelegatingRunEnded",
    "DelegationDenied",
    "DelegationRefusal",
    "EngineShutdown",
    "ExternalBusy",
    "ExternalOnly",
    "IdempotencyConflict",
    "InboxFull",
    "InflightFull",
    "InvalidArguments",
    "InvalidBody",
    "InvalidToolArguments",
    "MaxHopsExceeded",
    "MessagingDisabled",
    "NoRunInFlight",
    "NotASubagent",
    "NotTreePeer",
    "PermissionDenied",
    "PluginBodyTooLarge",
    "PluginFailed",
    "PluginRefusal",
    "ProducerKeyConflict",
    "Refusal",
    "SelfSend",
    "SendRefusal",
    "SessionTokenRevoked",
    "SessionTokenUnknown",
    "ToolFailed",
    "UnknownAgent",
    "UnknownApproval",
    "UnknownSentMessage",
    "UnknownSession",
    "UnknownSubagent",
    "UnknownSubagentReference",
    "UnknownTool",
]

declare(__name__)


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



class NoRunInFlight(Refusal):
    """``run.cancel`` named a session with no queued or running run; nothing was changed.
    ``details``: ``session_id`` and its ``state``."""

    code = "run:not_in_flight"


# -- external sessions (their tokens; ``treemail.core.external``) ---------------------------


class SessionTokenUnknown(Refusal):
    """A session token names no external session of this daemon: mistyped, cut short, or
    issued by another data directory. Ask the user for the token ``treemail attach`` printed."""

    code = "external:unknown_token"


class SessionTokenRevoked(Refusal):
    """The session token was revoked (``treemail tokens revoke``); it binds no one any more.
    A new one comes from ``treemail tokens issue``."""

    code = "external:token_revoked"


class ExternalBusy(Refusal):
    """Another connection holds this external session's mail, claimed by its check_mail and
    not yet consumed; it is released when that connection ends."""

    code = "external:busy"


class UnknownSentMessage(Refusal):
    """The session sent no agent message by that id. Said alike of a message that does not
    exist and of another session's, so a receipt never tells one session about another's
    mail."""

    code = "receipt:unknown_message"


class CancelTooLate(Refusal):
    """The message can no longer be cancelled: a model request claimed it (or it is already
    consumed or discarded); ``details`` carry its ``state``."""

    code = "receipt:too_late"


class ExternalOnly(Refusal):
    """A token was asked for a session an actor hosts: only external sessions take tokens."""

    code = "external:not_external"
