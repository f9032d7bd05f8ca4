"""A run whose write is fenced writes nothing more into its tree.

Daemons sharing a PostgreSQL store fence a write into a tree the writer does not hold (its
lease taken over, lapsed, or dropped): the tree is another daemon's, or this daemon's again
only through a new claim, whose recovery interrupts the run. So the actor leaves the run as
a crash would: it neither retries (a loop against a fence that may never lift) nor
interrupts the run itself (a write into a tree that is not its own), and the owner's
recovery (``adopt``, as the daemon runs it when it claims the tree) releases the mail, which
is then consumed once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest

from tests.unit.conftest import agent
from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ScriptedModel
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.core.errors import StoreFenced
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import Session
from treemail.core.runs import CRASH
from treemail.core.store import WriteTxn

T = TypeVar("T")


class FencedOnce(MemoryStore):
    """Refuses its next write transaction with ``store:fenced`` once armed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.refused = 0

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        if self.armed:
            self.armed = False
            self.refused += 1
            raise StoreFenced("this daemon does not own the tree: nothing was stored")
        return super().transact(work)


def test_a_fenced_run_is_left_to_the_owners_recovery_and_its_mail_is_consumed_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FencedOnce()
    answered: list[str] = []

    def reply(messages: Sequence[ChatMessage]) -> ModelReply:
        # The first request of the first run: its task is claimed now, and the write that
        # records this answer is the one fenced.
        if not answered:
            store.armed = True
        answered.append("done")
        return ModelReply(text="done")

    async def go() -> tuple[Runtime, Session, str, list[object]]:
        rt = Runtime(store, CountingIds(), {"root": Agent(agent("root"), ScriptedModel(reply))})
        await rt.start()
        root = await rt.create_root("root")
        task = await rt.accept(root.session_id, "go")
        while "its run is left to the tree's owner" not in caplog.text:
            await asyncio.sleep(0.01)
        left: list[object] = [rt.engine.message(task).state,
                              rt.engine.session(root.session_id).state]
        await rt.adopt([root.session_id])  # the tree claimed (back): recovered, then run
        await rt.quiesce(timeout=20)
        await rt.shutdown()
        return rt, root, task, left

    rt, root, task, left = asyncio.run(asyncio.wait_for(go(), 30))
    assert store.refused == 1  # the fenced write was not tried again
    assert left == [MessageState.CLAIMED, SessionState.RUNNING]  # as a crash leaves it
    assert rt.engine.message(task).state is MessageState.CONSUMED
    ends = [(e.kind, e.data.get("reason")) for e in rt.engine.events(root.session_id)
            if e.kind in (EventKind.RUN_INTERRUPTED, EventKind.RUN_FINISHED)]
    assert ends == [(EventKind.RUN_INTERRUPTED, CRASH), (EventKind.RUN_FINISHED, "completed")], ends
