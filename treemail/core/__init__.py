"""The verified core: pure decisions, no I/O. See ``engine`` for the theory of operation."""

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
from treemail.core.store import MemoryStore, Store

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
