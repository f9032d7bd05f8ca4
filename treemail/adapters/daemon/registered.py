"""Agent docs registered over the wire, kept so a restarted daemon still knows them.

``session.create`` may define agents inline (``agent_doc``, ``agent_docs``). Their sessions
outlive the daemon in the store, but a doc held only in memory did not: a restarted daemon
failed those sessions' next runs on an unknown agent. So each doc is written, as given, to
``DATA_DIR/registered-agents/NAME.md`` before its agent is used (a temporary file, fsynced,
renamed over the old one, the directory fsynced: a crash leaves the old doc or the new one,
never part of one), and a starting daemon loads them over ``DATA_DIR/agents/``, as a live
daemon had them: a later registration replaces an agent of the same name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from treemail.adapters.runtime.agent_docs import load_agent_docs
from treemail.core.agents import AgentDoc

__all__ = ["REGISTERED_DIR", "load", "save"]

REGISTERED_DIR = "registered-agents"


def save(directory: Path, docs: Sequence[tuple[AgentDoc, str]]) -> None:
    """Keep each (doc, its text) durably in ``directory``, one file a name."""
    directory.mkdir(mode=0o700, exist_ok=True)
    for doc, text in docs:
        temporary = directory / f".{doc.spec.name}.md.tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, directory / f"{doc.spec.name}.md")
    where = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(where)  # the renames themselves survive a crash
    finally:
        os.close(where)


def load(directory: Path) -> dict[str, AgentDoc]:
    """The docs kept in ``directory``, by agent name (none if it does not exist)."""
    return load_agent_docs(directory) if directory.is_dir() else {}
