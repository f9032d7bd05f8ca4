"""The one registry of treemail's errors, each with a stable code, and the core's own.

Three families are kept apart, as the user must react to each differently:

* ``DefinitionError``: the caller built something invalid (a bad config, a bad agent doc,
  an illegal lifecycle step, a tool context that names no run). Fix the code or the input.
* ``Refusal``: the engine refused an operation a model or user asked for. The store is
  unchanged; a ``SendRefusal`` is what the sending model sees as its tool error.
* ``StorageError``: the store failed or holds data it cannot read.

``ToolNote``s are never raised: they stand in for a tool result the log does not hold (a call
still waiting for approval, a run that died first).

Each layer declares its own errors in its own module, which registers here with
``declare(__name__)`` (the core imports nothing above it): the wire's codes in
``treemail.protocol.rpc_errors``, the daemon's and its client's in
``treemail.adapters.daemon.errors``, a store URL the store wing cannot open in
``treemail.adapters.store.errors``, a failed model call (``ModelError``) in
``treemail.adapters.runtime.model_errors``. ``registry()`` lists every registered class;
``spec/errors.json`` (which imports every layer) lists them all, and
``tests/unit/test_error_registry.py`` fails on a code declared in any other module.
``treemail.core.results`` turns any of them into a tool result or a (code, message, data)
triple; the daemon maps codes onto wire codes in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

__all__ = [
    "AgentDocError",
    "ApprovalPending",
    "ApprovalRequired",
    "CancelTooLate",
    "ConfigError",
    "ConfigExists",
    "ConfigUnknownKey",
    "DefinitionError",
    "DelegatingRunEnded",
    "DelegationDenied",
    "DelegationRefusal",
    "EngineShutdown",
    "ExternalBusy",
    "ExternalOnly",
    "ExtraMissing",
    "IdempotencyConflict",
    "IllegalTransition",
    "InboxFull",
    "InflightFull",
    "InvalidArguments",
    "InvalidBody",
    "InvalidRequest",
    "InvalidToolArguments",
    "InvalidToolContext",
    "MaxHopsExceeded",
    "MessagingDisabled",
    "NoRunInFlight",
    "NotASubagent",
    "NotTreePeer",
    "OutcomeUnknown",
    "PermissionDenied",
    "PluginBodyTooLarge",
    "PluginFailed",
    "PluginLoadError",
    "PluginRefusal",
    "ProducerKeyConflict",
    "Refusal",
    "SelfSend",
    "SendRefusal",
    "SessionTokenRevoked",
    "SessionTokenUnknown",
    "StorageError",
    "StoreClosed",
    "StoreDamaged",
    "StoreFenced",
    "StoreFormatUnknown",
    "StoreFull",
    "StoreLocked",
    "StoreMissing",
    "StoreNotPrivate",
    "ToolFailed",
    "ToolInterrupted",
    "ToolNote",
    "TreemailError",
    "UnknownAgent",
    "UnknownApproval",
    "UnknownSentMessage",
    "UnknownSession",
    "UnknownSubagent",
    "UnknownSubagentReference",
    "UnknownTarget",
    "UnknownTool",
    "declare",
    "declaring_modules",
    "registry",
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


_DECLARING: list[str] = [__name__]


def declare(module: str) -> None:
    """Register ``module``, a layer's own errors module, into the one registry."""
    if module not in _DECLARING:
        _DECLARING.append(module)


def declaring_modules() -> tuple[str, ...]:
    """The modules whose error classes make the registry: this one, then each layer's, in
    the order they were imported."""
    return tuple(_DECLARING)


def registry() -> list[type[TreemailError]]:
    """Every error class of a registered module but the root, breadth first (a test's
    subclass, or any class of an unregistered module, is not the API)."""
    found: list[type[TreemailError]] = []
    todo = list(TreemailError.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo.extend(cls.__subclasses__())
        found += [cls] if cls.__module__ in _DECLARING else []
    return found


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
    "unknown_field", "bad_name", "bad_text", "bad_flag",  # the fields
    "bad_permissions", "unknown_action", "bad_rules", "bad_label", "bad_rule_action",
    "unknown_label", "ask_not_allowed",  # the permissions
)


class AgentDocError(DefinitionError):
    """An agent doc is malformed; the message names the file and the field, and the
    ``problem`` detail names the cause, one of ``AGENT_DOC_PROBLEMS``: no_directory,
    unreadable, not_utf8, duplicate_name, no_frontmatter, unclosed_frontmatter, too_large,
    yaml_syntax, bad_value, alias, too_deep, bad_key, duplicate_key, not_mapping,
    unknown_field, bad_name, bad_text, bad_flag, bad_permissions, unknown_action, bad_rules,
    bad_label, bad_rule_action, unknown_label, ask_not_allowed."""

    code = "agent_doc:invalid"

    def __init__(self, message: str, *, problem: str, **details: object) -> None:
        if problem not in AGENT_DOC_PROBLEMS:
            raise ValueError(f"agent doc problem {problem!r} is not in AGENT_DOC_PROBLEMS")
        super().__init__(message, problem=problem, **details)


class IllegalTransition(DefinitionError):
    """A lifecycle trigger was fired in a state that does not allow it; nothing changed."""

    code = "lifecycle:illegal_transition"

    def __init__(self, subject: str, trigger: str, state: str, allowed: tuple[str, ...]) -> None:
        super().__init__(
            f"cannot {trigger} {subject} in state {state!r}; "
            f"from {state!r} only {', '.join(allowed) or 'no event'} is allowed",
            subject=subject,
            event=str(trigger),
            state=state,
            allowed=[str(a) for a in allowed],
        )
        self.subject = subject
        # ``event`` (not ``trigger``) is the name its details have always carried.
        self.event = str(trigger)
        self.state = state
        # The triggers the lifecycle table allows from ``state``, in the table's order.
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


class ExtraMissing(DefinitionError):
    """A command needs a package treemail installs only as an extra (the TUI's Textual, the
    MCP SDK); the message names the pip command that installs it."""

    code = "install:extra_missing"


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


class StoreFenced(StorageError):
    """This writer's lease on a tree was taken over (or ran out): nothing was stored; the
    tree's new owner serves it now."""

    code = "store:fenced"


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
