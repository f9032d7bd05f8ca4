"""The daemon's config: ``DATA_DIR/config.toml``, decoded whole and strictly.

Every table and key is declared here (``[daemon]`` and its sub-tables, ``[runs]``, as
msgspec structs) or beside the setting it feeds (``[messaging]``: ``MessagingConfig``;
``[daemon.limits]``: ``connection.Limits``). A table or key nobody declares is refused with
the nearest known name (``ConfigUnknownKey``): a ``[deamon]`` typo silently ignored would run
the scripted model while the user believes a real one answers. spec/config.md documents every
key and is generated from these declarations (``treemail.spec_tables``).

The file is read from the data directory only. A ``config.toml`` in the working directory of
a daemon whose data directory is elsewhere is not read; ``notes`` says so at start.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import attrs
import msgspec

from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.scripted import ScriptedAgent, ScriptedEcho
from treemail.adapters.runtime.budget import (
    DEFAULT_MAX_MODEL_REQUESTS,
    DEFAULT_MAX_TOOL_CALLS,
    Budget,
)
from treemail.adapters.runtime.llm import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES,
    Model,
    OpenAICompatibleModel,
    unreachable_hint,
)
from treemail.adapters.runtime.runtime import DEFAULT_ACTOR_IDLE_TIMEOUT
from treemail.adapters.store.leases import DEFAULT_LEASE_SECONDS
from treemail.core.config import DEFAULTS, MessagingConfig, unknown_key
from treemail.core.errors import ConfigError

__all__ = ["CONFIG_FILE", "ConfigFile", "DaemonTable", "OpenAITable", "RunsTable",
           "ScriptedTable",
           "Settings", "known_keys"]

CONFIG_FILE = "config.toml"
SCRIPTED: dict[str, type[ScriptedAgent | ScriptedEcho]] = {
    "scripted": ScriptedAgent, "echo": ScriptedEcho}


class OpenAITable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``[daemon.openai]``: The OpenAI-compatible endpoint behind ``model = "openai"``."""

    base_url: Annotated[str, msgspec.Meta(
        description="the endpoint, with its scheme, e.g. http://localhost:8000/v1; requests "
                    "go to BASE_URL/chat/completions (required with model = \"openai\")")] = ""
    model: Annotated[str, msgspec.Meta(
        description="the model name sent with every request; an agent doc's `model:` "
                    "overrides it for that agent")] = ""
    api_key_env: Annotated[str, msgspec.Meta(
        description="the NAME of the environment variable that holds the API key, never "
                    "the key itself; the daemon warns at start when it is unset")] = (
        "OPENAI_API_KEY")
    timeout: Annotated[float, msgspec.Meta(
        gt=0, description="seconds one model call may take, from sending to its last byte, "
                          "before it fails")] = 120.0
    stream: Annotated[bool, msgspec.Meta(
        description="ask for the reply as a stream (stream: true, Server-Sent Events), so "
                    "that a server stalling mid-reply fails after idle_timeout instead of "
                    "timeout; off by default: the runtime takes whole replies either way, and "
                    "every chat-completions server answers unstreamed")] = False
    idle_timeout: Annotated[float, msgspec.Meta(
        gt=0, description="with stream = true, seconds the stream may send nothing before "
                          "the call fails")] = DEFAULT_IDLE_TIMEOUT
    max_reply_bytes: Annotated[int, msgspec.Meta(
        ge=1024, description="bytes one reply may weigh, streamed or not, before the call "
                             "fails (a server sending without end)")] = DEFAULT_MAX_REPLY_BYTES


class ScriptedTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``[daemon.scripted]``: The offline models (``scripted`` and ``echo``)."""

    delay: Annotated[float, msgspec.Meta(
        ge=0, description="seconds each scripted reply waits, to watch a tree talk")] = 0.0


Adapter = Literal["scripted", "echo", "openai"]


class ClusterTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``[daemon.cluster]``: Daemons sharing one PostgreSQL store (``ownership.py``)."""

    lease_seconds: Annotated[float, msgspec.Meta(
        gt=0, le=3600, description="seconds a daemon's lease on its trees lasts without a "
        "heartbeat (renewed every third of it); a dead daemon's trees are taken over once "
        "it runs out")] = DEFAULT_LEASE_SECONDS
    wakeups: Annotated[Literal["notify", "poll"], msgspec.Meta(
        description="how a daemon hears the others: notify (PostgreSQL LISTEN/NOTIFY, with "
        "a slow poll behind it) or poll (for a server or pooler without NOTIFY)")] = "notify"


class DaemonTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``[daemon]``: Which model answers, and the daemon's own limits."""

    model: Annotated[Adapter, msgspec.Meta(
        description="the model adapter: scripted (offline, follows the agent docs' "
                    "directives), echo (only notes what it read) or openai (a real "
                    "endpoint, see [daemon.openai])")] = "scripted"
    openai: OpenAITable = msgspec.field(default_factory=OpenAITable)
    scripted: ScriptedTable = msgspec.field(default_factory=ScriptedTable)
    limits: dict[str, Any] = msgspec.field(default_factory=dict)
    cluster: ClusterTable = msgspec.field(default_factory=ClusterTable)
    actor_idle_timeout: Annotated[float, msgspec.Meta(
        gt=0, description="seconds a session's actor with nothing to do stays in memory "
                          "before it is evicted (the next mail spawns it again, its "
                          "history rebuilt from the log)")] = DEFAULT_ACTOR_IDLE_TIMEOUT


class RunsTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``[runs]``: What one run may spend before it is interrupted (a model in a loop)."""

    max_model_requests: Annotated[int, msgspec.Meta(
        ge=0, description="model requests one run may make; the next one interrupts it "
                          "instead (0: no limit)")] = DEFAULT_MAX_MODEL_REQUESTS
    max_tool_calls: Annotated[int, msgspec.Meta(
        ge=0, description="tool calls one run may make; the next one interrupts it instead "
                          "(0: no limit)")] = DEFAULT_MAX_TOOL_CALLS


class ConfigFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The whole file: ``[messaging]``, ``[runs]`` and ``[daemon]``."""

    messaging: dict[str, Any] = msgspec.field(default_factory=dict)
    runs: RunsTable = msgspec.field(default_factory=RunsTable)
    daemon: DaemonTable = msgspec.field(default_factory=DaemonTable)


# The tables whose keys are declared by an attrs class rather than a struct field.
_OPEN_TABLES: Mapping[str, tuple[str, ...]] = {
    "messaging": tuple(DEFAULTS),
    "daemon.limits": tuple(f.name for f in attrs.fields(Limits)),
}
_STRUCTS: Mapping[str, type[msgspec.Struct]] = {
    "": ConfigFile, "daemon": DaemonTable, "daemon.openai": OpenAITable,
    "daemon.scripted": ScriptedTable, "daemon.cluster": ClusterTable, "runs": RunsTable,
}


def known_keys(table: str) -> tuple[str, ...]:
    """The keys table ``table`` (dotted; "" is the top level) may hold."""
    if table in _OPEN_TABLES:
        return _OPEN_TABLES[table]
    return tuple(_STRUCTS[table].__struct_fields__)


def _check_keys(table: str, value: Mapping[str, Any], where: str) -> None:
    known = known_keys(table)
    for key, inner in value.items():
        if key not in known:
            raise unknown_key(table, key, known, where)
        path = f"{table}.{key}" if table else key
        if isinstance(inner, Mapping) and (path in _STRUCTS or path in _OPEN_TABLES):
            _check_keys(path, inner, where)


def decode(document: Mapping[str, Any], where: str) -> ConfigFile:
    """The parsed TOML ``document`` as a ``ConfigFile``: unknown names first (with a
    suggestion), then every value's type and range."""
    _check_keys("", document, where)
    try:
        return msgspec.convert(document, ConfigFile, strict=True)
    except msgspec.ValidationError as exc:
        text, _, at = str(exc).partition(" - at `$")
        table = ".".join(at.rstrip("`").lstrip(".").split(".")) or "the top level"
        raise ConfigError(f"{where}: {text} at {table}", at=table) from None


@attrs.frozen
class Settings:
    messaging: MessagingConfig = attrs.field(factory=MessagingConfig)
    model: str = "scripted"
    openai: OpenAITable = attrs.field(factory=OpenAITable)
    delay: float = 0.0
    limits: Limits = attrs.field(factory=Limits)
    budget: Budget = attrs.field(factory=Budget)
    source: str = "defaults"  # where these came from: the config file's path, or defaults
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    wakeups: str = "notify"
    actor_idle_timeout: float = DEFAULT_ACTOR_IDLE_TIMEOUT

    @classmethod
    def load(cls, data_dir: Path) -> Settings:
        path = data_dir / CONFIG_FILE
        if not path.exists():
            return cls()
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
        return cls.from_file(decode(document, str(path)), str(path))

    @classmethod
    def from_file(cls, config: ConfigFile, where: str) -> Settings:
        daemon = config.daemon
        try:
            messaging = MessagingConfig.from_mapping(config.messaging)
        except ConfigError as error:
            raise type(error)(f"{where}: {error.message}", **error.details) from None
        return cls(messaging, daemon.model, daemon.openai, daemon.scripted.delay,
                   Limits.from_mapping(daemon.limits, f"{where}: [daemon.limits]"),
                   Budget(config.runs.max_model_requests, config.runs.max_tool_calls), where,
                   daemon.cluster.lease_seconds, daemon.cluster.wakeups,
                   daemon.actor_idle_timeout)

    def model_for(self, agent: str, doc_model: str | None) -> Model:
        if self.model in SCRIPTED:
            return SCRIPTED[self.model](self.delay)
        if not self.openai.base_url:
            raise ConfigError("[daemon.openai] base_url is required with model = openai")
        return OpenAICompatibleModel(self.openai.base_url,
                                     os.environ.get(self.openai.api_key_env),
                                     doc_model or self.openai.model,
                                     timeout=self.openai.timeout,
                                     stream=self.openai.stream,
                                     idle_timeout=self.openai.idle_timeout,
                                     max_reply_bytes=self.openai.max_reply_bytes)

    def describe(self) -> str:
        """The model in use and where its config came from, for the start-up line."""
        if self.model == "openai":
            used = f"openai {self.openai.model or '(model from agent docs)'} at " \
                   f"{self.openai.base_url or '(no base_url)'}"
        else:
            used = self.model
        return f"model {used}; config from {self.source}"

    def warnings(self, data_dir: Path, cwd: Path) -> list[str]:
        """What the person starting the daemon should know before a model call fails."""
        found: list[str] = []
        stray = cwd / CONFIG_FILE
        if stray.is_file() and stray.resolve() != (data_dir / CONFIG_FILE).resolve():
            found.append(f"{stray} is not read: the daemon reads {data_dir / CONFIG_FILE}; "
                         f"move it there, or start with --data-dir {cwd}")
        if self.model != "openai":
            return found
        if not os.environ.get(self.openai.api_key_env):
            found.append(f"the API key variable {self.openai.api_key_env} is unset; model "
                         f"calls will be refused (HTTP 401) unless the endpoint needs no "
                         f"key: export {self.openai.api_key_env}, or set [daemon.openai] "
                         "api_key_env")
        base = self.openai.base_url
        if not base:
            found.append("[daemon.openai] base_url is unset; every session will fail")
        elif "://" not in base or not base.lower().startswith(("http://", "https://")):
            found.append(unreachable_hint(base))
        return found
