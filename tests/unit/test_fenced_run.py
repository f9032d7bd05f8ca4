"""A run whose write is fenced keeps no mail claimed.

Daemons sharing a PostgreSQL store fence every write of a daemon one of whose tree leases
lapsed, so a fenced write does not mean that this run's tree is another daemon's: the lease
may be renewed, or the tree claimed again, a moment later. The actor therefore waits the
fence out as it waits out a store that went away, and then interrupts the run as a restart
would; the released mail comes again in the next run and is consumed once. (An actor that
gave its run up at the first fenced write left the task claimed for ever, with nobody to
recover it: the two-daemon failover test caught that under load.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

from tests.unit.conftest import agent
from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ScriptedModel
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.core.errors import StoreFenced
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState
from treemail.core.records import Session
from treemail.core.store import MemoryStore, WriteTxn

T = TypeVar("T")


class FencedFor(MemoryStore):
    """Refuses its next ``writes`` write transactions with ``store:fenced`` once armed."""

    def __init__(self, writes: int) -> None:
        super().__init__()
        self.left = writes
        self.armed = False
        self.refused = 0

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        if self.armed and self.left > 0:
            self.left -= 1
            self.refused += 1
            raise StoreFenced("this daemon's lease on a tree lapsed: nothing was stored")
        return super().transact(work)


def test_a_fenced_run_is_interrupted_once_writes_pass_and_its_mail_is_consumed_once() -> None:
    store = FencedFor(writes=3)

    def reply(messages: Sequence[ChatMessage]) -> ModelReply:
        # The first request of the first run: its task is claimed now, and the write that
        # records this answer is the first one fenced.
        if not store.armed:
            store.armed = True
        return ModelReply(text="done")

    async def go() -> tuple[Runtime, Session, str]:
        rt = Runtime(store, CountingIds(), {"root": Agent(agent("root"), ScriptedModel(reply))})
        await rt.start()
        root = await rt.create_root("root")
        task = await rt.accept(root.session_id, "go")
        while store.left:  # the fence, met by the run's writes only (quiesce reads too)
            await asyncio.sleep(0.01)
        await rt.quiesce(timeout=20)
        await rt.shutdown()
        return rt, root, task

    rt, root, task = asyncio.run(asyncio.wait_for(go(), 30))
    assert store.refused == 3  # the fence was met, and waited out
    assert rt.engine.message(task).state is MessageState.CONSUMED
    ends = [(e.kind, e.data.get("reason")) for e in rt.engine.events(root.session_id)
            if e.kind in (EventKind.RUN_INTERRUPTED, EventKind.RUN_FINISHED)]
    assert ends == [(EventKind.RUN_INTERRUPTED, "the store failed: store:fenced"),
                    (EventKind.RUN_FINISHED, "completed")], ends
