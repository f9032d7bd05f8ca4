"""Agent docs from a directory: every ``*.md`` file is one agent, merged over the built-ins.

Parsing is the core's (``parse_agent_doc``); this module only reads files, so every error
names the file it came from. A user doc named like a built-in (``default``, ``explore``)
replaces it: that is how a user gives the default agent a message rule. Built-ins have no
rules, so send_message stays hidden from them until a doc grants one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from treemail.adapters.runtime.llm import Model
from treemail.adapters.runtime.runtime import Agent
from treemail.core.agents import BUILTIN_AGENTS, AgentDoc, parse_agent_doc
from treemail.core.errors import AgentDocError
from treemail.core.records import AgentSpec

__all__ = ["agent_specs", "build_agents", "load_agent_docs"]

# Picks the model of an agent from its name and the doc's ``model`` field (None if unset or
# for a built-in).
ModelFor = Callable[[str, str | None], Model]


def load_agent_docs(directory: str | os.PathLike[str]) -> dict[str, AgentDoc]:
    """Every ``*.md`` doc of ``directory`` (not recursive), by agent name."""
    root = Path(directory)
    if not root.is_dir():
        raise AgentDocError(f"{root}: agent docs directory does not exist or is not a directory",
                            source=str(root), field="directory", problem="no_directory")
    docs: dict[str, AgentDoc] = {}
    for path in sorted(root.glob("*.md")):
        doc = parse_agent_doc(_read(path), source=str(path))
        clash = docs.get(doc.spec.name)
        if clash is not None:
            raise AgentDocError(
                f"{path}: name {doc.spec.name!r} is already defined by {clash.source}; "
                "agent names must be unique", source=str(path), field="name",
                problem="duplicate_name")
        docs[doc.spec.name] = doc
    return docs


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise AgentDocError(f"{path}: is not UTF-8 text ({exc})", source=str(path),
                            field="encoding", problem="not_utf8") from exc
    except OSError as exc:
        raise AgentDocError(f"{path}: cannot be read ({exc})", source=str(path),
                            field="file", problem="unreadable") from exc


def agent_specs(docs: Mapping[str, AgentDoc]) -> dict[str, AgentSpec]:
    """The built-in agents, with the docs' agents added over them."""
    return {**BUILTIN_AGENTS, **{name: doc.spec for name, doc in docs.items()}}


def build_agents(docs: Mapping[str, AgentDoc], model_for: ModelFor) -> dict[str, Agent]:
    """Runtime agents for the built-ins and every doc; a doc's prompt is its system prompt."""
    agents = {name: Agent(spec, model_for(name, None)) for name, spec in BUILTIN_AGENTS.items()}
    for name, doc in docs.items():
        agents[name] = Agent(doc.spec, model_for(name, doc.model), doc.prompt, doc.messaging)
    return agents
