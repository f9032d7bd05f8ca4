"""A registration whose request is cancelled (its client hung up) while its doc is being
written still runs to its end, and holds its name until then: the next registration of the
name waits for it, so the kept file and the running agent end up the same doc."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from treemail.adapters.daemon import registered
from treemail.adapters.daemon.registered import Registered
from treemail.core.agents import AgentDoc, parse_agent_doc


def _doc(version: int) -> tuple[AgentDoc, str]:
    text = f"---\nname: keeper\ndescription: version {version}\n---\nYou keep.\n"
    return parse_agent_doc(text), text


def test_a_cancelled_registration_finishes_before_the_next_one_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writing, go_on = threading.Event(), threading.Event()
    real_save = registered.save

    def held_save(directory: Path, docs: list[tuple[AgentDoc, str]]) -> None:
        writing.set()
        assert go_on.wait(30)
        real_save(directory, docs)

    monkeypatch.setattr(registered, "save", held_save)
    kept = Registered(tmp_path / "registered", {})
    live: list[str] = []

    async def scenario() -> None:
        first = asyncio.create_task(kept.keep([_doc(1)], lambda: live.append("version 1")))
        assert await asyncio.to_thread(writing.wait, 30)
        first.cancel()  # the client hung up while its doc was being written
        second = asyncio.create_task(kept.keep([_doc(2)], lambda: live.append("version 2")))
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await first
        await second

    asyncio.run(scenario())
    assert live == ["version 1", "version 2"]
    assert (tmp_path / "registered" / "keeper.md").read_text() == _doc(2)[1]
    assert sorted(p.name for p in (tmp_path / "registered").iterdir()) == ["keeper.md"]
