"""Group commit: engine operations batched into one write transaction by the runtime's Writer.

A refused or failing operation leaves no trace and does not undo its neighbours; the guards
stay exact (no cap exceeded by one); every caller is answered only after the commit; a failed
commit fails the whole batch; a full map re-runs the batch from scratch; batches are bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from tests.unit.conftest import World, agent
from treemail.adapters.runtime.writer import Writer
from treemail.adapters.store.group_commit import GroupStore
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import InboxFull, StorageError, UnknownSubagentReference
from treemail.core.ids import CountingIds
from treemail.core.keys import CounterName
from treemail.core.records import Owner, ToolContext
from treemail.core.store import ReadTxn, Store, WriteTxn

T = TypeVar("T")

OPEN = {"*": "allow"}
ROOMY = MessagingConfig(max_pending_per_session=10**6, max_inflight_per_pair=0)


def _setup(store: Store, config: MessagingConfig | None = None,
           senders: int = 1) -> tuple[GroupStore, Engine, str, list[ToolContext]]:
    """A root with ``senders`` running children; all send to the root (running too)."""
    group = GroupStore(store)
    engine = Engine(group, CountingIds(), config or ROOMY)
    root = engine.create_root(agent("root", OPEN))
    engine.accept(root.session_id, "go", Owner.USER)
    engine.start_run(root.session_id)
    contexts = []
    for n in range(senders):
        child = engine.delegate(root.session_id, agent(f"kid{n}", OPEN), "task")
        run = engine.start_run(child.session_id)
        contexts.append(ToolContext(child.session_id, run.run_id, "call"))
    return group, engine, root.session_id, contexts


def _call(ctx: ToolContext, n: int) -> ToolContext:
    return ToolContext(ctx.session_id, ctx.run_id, f"call-{n}")


def _write_then_fail(txn: WriteTxn) -> None:
    txn.add(CounterName("scratch"), 1)
    raise RuntimeError("fails after writing")


def test_a_refusal_in_a_batch_leaves_no_trace_and_keeps_its_neighbours(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    committed = World(store).engine  # an engine on the bare store: reads what was committed
    failures: list[BaseException] = []

    def batch() -> None:
        engine.send_message(_call(ctx, 1), {"to": root, "body": "first"})
        try:
            engine.send_message(_call(ctx, 2), {"to": "nobody-here", "body": "lost"})
        except UnknownSubagentReference as exc:
            failures.append(exc)
        try:
            group.transact(_write_then_fail)
        except RuntimeError as exc:
            failures.append(exc)
        engine.send_message(_call(ctx, 3), {"to": root, "body": "third"})

    group.batch(batch)
    assert len(failures) == 2
    bodies = [m.body for m in committed.pending(root) if m.owner is Owner.AGENT]
    assert bodies == ["first", "third"]
    with store.read() as txn:
        assert txn.count(CounterName("scratch")) == 0
    # The refused call left nothing behind: retrying the same call id is a fresh send.
    engine.send_message(_call(ctx, 2), {"to": root, "body": "second, retried"})
    assert [m.body for m in committed.pending(root) if m.owner is Owner.AGENT][-1] == \
        "second, retried"


def test_a_failing_batch_keeps_nothing(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    count = len(engine.pending(root))

    def batch() -> None:
        engine.send_message(_call(ctx, 1), {"to": root, "body": "first"})
        raise RuntimeError("the batch dies before its commit")

    with pytest.raises(RuntimeError):
        group.batch(batch)
    assert len(engine.pending(root)) == count


def test_reads_inside_a_batch_see_the_batch(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    outside = World(store).engine
    seen: list[int] = []

    before = len(engine.pending(root))

    def batch() -> None:
        engine.send_message(_call(ctx, 1), {"to": root, "body": "first"})
        seen.append(len(engine.pending(root)))
        # Another thread reads only what is committed (MemoryStore isolates nothing).
        reader = threading.Thread(target=lambda: seen.append(len(outside.pending(root))))
        reader.start()
        reader.join()

    group.batch(batch)
    assert seen[0] == before + 1
    if isinstance(store, LmdbStore):
        assert seen[1] == before
    with pytest.raises(RuntimeError, match="do not nest"):
        group.batch(lambda: group.batch(lambda: None))


async def _many(writer: Writer, calls: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    return await asyncio.gather(*(writer(call) for call in calls), return_exceptions=True)


def test_the_inbox_cap_holds_exactly_under_batching(store: Store) -> None:
    cap = 5
    config = MessagingConfig(max_pending_per_session=cap, max_inflight_per_pair=0)
    group, engine, root, contexts = _setup(store, config, senders=8)
    writer = Writer(group=group)
    calls = [partial(engine.send_message, _call(ctx, n), {"to": root, "body": "hi"})
             for n in range(3) for ctx in contexts]
    outcomes = asyncio.run(_many(writer, calls))
    writer.close()
    accepted = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(accepted) == cap
    assert all(isinstance(o, InboxFull) for o in refused)
    assert len([m for m in engine.pending(root) if m.owner is Owner.AGENT]) == cap
    assert writer.batches < len(calls)  # not vacuous: calls did share commits


class _FailingCommit:
    """A store whose commits fail after the work ran: as a disk error at fsync would."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fail = False

    def read(self) -> AbstractContextManager[ReadTxn]:
        return self.store.read()

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        def then_fail(txn: WriteTxn) -> T:
            result = work(txn)
            if self.fail:
                raise StorageError("simulated commit failure")
            return result

        return self.store.transact(then_fail)

    def own(self, holder: Mapping[str, str]) -> None:
        self.store.own(holder)

    def close(self) -> None:
        self.store.close()


def test_a_failed_commit_fails_every_call_of_the_batch(store: Store) -> None:
    failing = _FailingCommit(store)
    group, engine, root, contexts = _setup(failing, senders=4)
    before = len(engine.pending(root))
    writer = Writer(group=group)
    failing.fail = True
    calls = [partial(engine.send_message, ctx, {"to": root, "body": "hi"}) for ctx in contexts]
    outcomes = asyncio.run(_many(writer, calls))
    writer.close()
    assert all(isinstance(o, StorageError) for o in outcomes)
    failing.fail = False
    assert len(engine.pending(root)) == before


def test_answers_come_after_the_commit(store: Store) -> None:
    """A caller that reads after its answer, on another thread, sees its send committed."""
    group, engine, root, contexts = _setup(store, senders=6)
    outside = World(store).engine
    writer = Writer(group=group)

    async def send_then_look(ctx: ToolContext) -> bool:
        sent = await writer(engine.send_message, ctx, {"to": root, "body": "hi"})
        seen = await asyncio.to_thread(outside.message, sent.message_id)
        return seen.body == "hi"

    async def main() -> list[bool]:
        return await asyncio.gather(*(send_then_look(c) for c in contexts))

    assert all(asyncio.run(main()))
    writer.close()


def test_batches_are_bounded_by_count(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    gate = threading.Event()
    writer = Writer(group=group, max_batch=4, max_wait=60)

    async def main() -> None:
        # The first call holds the writer until all others are queued behind it.
        first = asyncio.ensure_future(writer(gate.wait))
        rest = [asyncio.ensure_future(writer(engine.send_message, _call(ctx, n),
                                             {"to": root, "body": "hi"})) for n in range(16)]
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(first, *rest)

    asyncio.run(main())
    writer.close()
    assert writer.batches >= 17 // 4


def test_a_full_map_reruns_the_whole_batch(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db", sync=False, map_size=1 << 16,
                           max_map_size=1 << 26)
    group, engine, root, contexts = _setup(store, senders=2)
    writer = Writer(group=group)
    calls = [partial(engine.send_message, _call(ctx, n), {"to": root, "body": "x" * 2000})
             for n in range(40) for ctx in contexts]
    outcomes = asyncio.run(_many(writer, calls))
    writer.close()
    assert not [o for o in outcomes if isinstance(o, BaseException)]
    ids = {o.message_id for o in outcomes if not isinstance(o, BaseException)}
    stored = {m.message_id for m in engine.pending(root) if m.owner is Owner.AGENT}
    assert ids == stored and len(ids) == 80
    store.close()


def test_a_call_cancelled_while_queued_never_runs(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    gate = threading.Event()
    writer = Writer(group=group)
    before = len(engine.pending(root))

    async def main() -> None:
        first = asyncio.ensure_future(writer(gate.wait))
        doomed = asyncio.ensure_future(writer(engine.send_message, ctx,
                                              {"to": root, "body": "never"}))
        await asyncio.sleep(0.05)
        doomed.cancel()
        await asyncio.sleep(0.01)  # the cancelled caller resumes and drops its queued job
        gate.set()
        await first
        await asyncio.gather(doomed, return_exceptions=True)

    asyncio.run(main())
    writer.close()
    assert len(engine.pending(root)) == before
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(writer(lambda: None))
