"""The verified core: pure decisions, no I/O. See ``engine`` for the theory of operation.

A name is imported on first use (PEP 562), so a module that needs one of them, or only
``treemail.core.errors``, does not pay for the whole core: the command line's client commands
start in a fraction of the time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treemail.core.agents import BUILTIN_AGENTS, AgentDoc, parse_agent_doc
    from treemail.core.config import MessagingConfig
    from treemail.core.engine import Delivery, Engine, Request
    from treemail.core.errors import (
        ApprovalRequired,
        ConfigError,
        DefinitionError,
        EngineShutdown,
        IllegalTransition,
        PermissionDenied,
        Refusal,
        SendRefusal,
        StorageError,
        TreemailError,
    )
    from treemail.core.ids import CountingIds, IdSource
    from treemail.core.lifecycle import MESSAGE, SESSION, MessageLifecycle, SessionLifecycle
    from treemail.core.memory_store import MemoryStore
    from treemail.core.permissions import Action, Rules
    from treemail.core.records import (
        AgentSpec,
        Event,
        Message,
        Mode,
        Owner,
        RecipientState,
        Run,
        SendResult,
        Session,
        ToolContext,
    )
    from treemail.core.store import Store

__all__ = [
    "BUILTIN_AGENTS",
    "MESSAGE",
    "SESSION",
    "Action",
    "AgentDoc",
    "AgentSpec",
    "ApprovalRequired",
    "ConfigError",
    "CountingIds",
    "DefinitionError",
    "Delivery",
    "Engine",
    "EngineShutdown",
    "Event",
    "IdSource",
    "IllegalTransition",
    "MemoryStore",
    "Message",
    "MessageLifecycle",
    "MessagingConfig",
    "Mode",
    "Owner",
    "PermissionDenied",
    "RecipientState",
    "Refusal",
    "Request",
    "Rules",
    "Run",
    "SendRefusal",
    "SendResult",
    "Session",
    "SessionLifecycle",
    "StorageError",
    "Store",
    "ToolContext",
    "TreemailError",
    "parse_agent_doc",
]

# Where each public name lives.
_WHERE: dict[str, str] = {
    "BUILTIN_AGENTS": "treemail.core.agents",
    "MESSAGE": "treemail.core.lifecycle",
    "SESSION": "treemail.core.lifecycle",
    "Action": "treemail.core.permissions",
    "AgentDoc": "treemail.core.agents",
    "AgentSpec": "treemail.core.records",
    "ApprovalRequired": "treemail.core.errors",
    "ConfigError": "treemail.core.errors",
    "CountingIds": "treemail.core.ids",
    "DefinitionError": "treemail.core.errors",
    "Delivery": "treemail.core.engine",
    "Engine": "treemail.core.engine",
    "EngineShutdown": "treemail.core.errors",
    "Event": "treemail.core.records",
    "IdSource": "treemail.core.ids",
    "IllegalTransition": "treemail.core.errors",
    "MemoryStore": "treemail.core.memory_store",
    "Message": "treemail.core.records",
    "MessageLifecycle": "treemail.core.lifecycle",
    "MessagingConfig": "treemail.core.config",
    "Mode": "treemail.core.records",
    "Owner": "treemail.core.records",
    "PermissionDenied": "treemail.core.errors",
    "RecipientState": "treemail.core.records",
    "Refusal": "treemail.core.errors",
    "Request": "treemail.core.engine",
    "Rules": "treemail.core.permissions",
    "Run": "treemail.core.records",
    "SendRefusal": "treemail.core.errors",
    "SendResult": "treemail.core.records",
    "Session": "treemail.core.records",
    "SessionLifecycle": "treemail.core.lifecycle",
    "StorageError": "treemail.core.errors",
    "Store": "treemail.core.store",
    "ToolContext": "treemail.core.records",
    "TreemailError": "treemail.core.errors",
    "parse_agent_doc": "treemail.core.agents",
}


if not TYPE_CHECKING:  # to mypy the names are the imports above: a typo stays an error

    def __getattr__(name: str) -> Any:
        if name not in _WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
