"""The one registry of treemail's errors, each with a stable code, and the core's own.

Three families are kept apart, as the user must react to each differently:

* ``DefinitionError``: the caller built something invalid (a bad config, a bad agent doc,
  an illegal lifecycle step, a tool context that names no run). Fix the code or the input.
* ``Refusal``: the engine refused an operation a model or user asked for. The store is
  unchanged; a ``SendRefusal`` is what the sending model sees as its tool error.
* ``StorageError``: the store failed or holds data it cannot read.

``ToolNote``s are never raised: they stand in for a tool result the log does not hold (a call
still waiting for approval, a run that died first).

This module defines the definition errors, the notes and the storage errors, and re-exports
the registry (``treemail.core.error_registry``: the root, ``declare``, ``registry()``) and the
refusals (``treemail.core.refusals``), so every error of the core is imported from here. Each
layer declares its own errors in its own module, which registers with ``declare(__name__)``;
see ``treemail.core.error_registry``.
``treemail.core.results`` turns any of them into a tool result or a (code, message, data)
triple; the daemon maps codes onto wire codes in one place.
"""

from __future__ import annotations

from typing import Final

from treemail.core.error_registry import TreemailError, declare, declaring_modules, registry
from treemail.core.refusals import (
    ApprovalRequired,
    CancelTooLate,
    DelegatingRunEnded,
    DelegationDenied,
    DelegationRefusal,
    EngineShutdown,
    ExternalBusy,
    ExternalOnly,
    IdempotencyConflict,
    InboxFull,
    InflightFull,
    InvalidArguments,
    InvalidBody,
    InvalidToolArguments,
    MaxHopsExceeded,
    MessagingDisabled,
    NoRunInFlight,
    NotASubagent,
    NotTreePeer,
    PermissionDenied,
    PluginBodyTooLarge,
    PluginFailed,
    PluginRefusal,
    ProducerKeyConflict,
    Refusal,
    SelfSend,
    SendRefusal,
    SessionTokenRevoked,
    SessionTokenUnknown,
    ToolFailed,
    UnknownAgent,
    UnknownApproval,
    UnknownSentMessage,
    UnknownSession,
    UnknownSubagent,
    UnknownSubagentReference,
    UnknownTool,
)

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

declare(__name__)


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
