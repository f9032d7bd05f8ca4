"""The writer's lanes (a store with several write connections): a call of one tree runs while
another tree's call is still running, and the calls of one tree run one at a time, in the
order they were made; the tree of a call is the tree of the session it names."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from typing import Any

from tests.unit.conftest import agent
from treemail.adapters.runtime.llm import ModelReply, ScriptedModel
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.adapters.runtime.writer import Writer, tree_lanes
from treemail.core.engine import Engine
from treemail.core.errors import StorageError
from treemail.core.ids import CountingIds
from treemail.core.memory_store import MemoryStore
from treemail.core.records import AgentSpec, Approval, Session

# "a" and "b" fall in different lanes of two, "a" and "c" in the same one.
TREE_A, TREE_B, TREE_C = "a", "b", "c"


def _by_first(fn: Callable[..., Any], args: tuple[Any, ...]) -> Hashable | None:
    return args[0] if args else None


def test_another_trees_call_runs_while_one_is_held_and_one_trees_calls_keep_their_order(
) -> None:
    writer = Writer(lanes=2, lane_of=_by_first)
    held, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow(tree: str, name: str) -> str:
        held.set()
        assert release.wait(30), "never released"
        order.append(name)
        return name

    def quick(tree: str, name: str) -> str:
        order.append(name)
        return name

    async def main() -> list[str]:
        first = asyncio.ensure_future(writer(slow, TREE_A, "a1"))
        assert await asyncio.to_thread(held.wait, 30)
        same = asyncio.ensure_future(writer(quick, TREE_C, "c1"))  # behind a1, same lane
        other = await writer(quick, TREE_B, "b1")  # answered while a1 is still held
        assert other == "b1" and order == ["b1"] and not same.done()
        release.set()
        return [await first, await same]

    try:
        assert asyncio.run(main()) == ["a1", "c1"]
        assert order == ["b1", "a1", "c1"]
    finally:
        writer.close()


def test_a_calls_lane_is_its_sessions_tree() -> None:
    engine = Engine(MemoryStore(), CountingIds())
    lane_of = tree_lanes(engine)
    root = engine.create_root(AgentSpec("lead", "plans"))
    child = engine.delegate(root.session_id, AgentSpec("lead", "plans"), "task")

    class Ctx:
        session_id = child.session_id

    assert lane_of(engine.accept, (child.session_id, "x")) == root.session_id
    assert lane_of(engine.send_message, (Ctx(), {})) == root.session_id
    assert lane_of(engine.sessions, ()) is None
    assert lane_of(engine.accept, ("no-such-session",)) is None


class _TwoWriters(MemoryStore):
    """A store that says it has two write connections, as ``?writers=2`` does."""

    writers = 2


def test_a_runtimes_mail_to_a_session_runs_on_its_trees_lane() -> None:
    """User mail is an engine call naming its session first, so it takes that session's
    tree's lane, as every call of the tree's actor does: wrapped in a closure, it named no
    session and ran on the first lane beside its tree's own."""
    seen: list[tuple[str, Hashable | None]] = []

    async def go() -> str:
        rt = Runtime(_TwoWriters(), CountingIds(),
                     {"root": Agent(agent("root"), ScriptedModel(
                         lambda *_: ModelReply(text="done")))})
        lane_of = rt.writer._lane_of
        assert lane_of is not None, "two write connections give the writer lanes"

        def recorded(fn: Callable[..., Any], args: tuple[Any, ...]) -> Hashable | None:
            lane = lane_of(fn, args)
            seen.append((getattr(fn, "__name__", repr(fn)), lane))
            return lane

        rt.writer._lane_of = recorded
        await rt.start()
        root = await rt.create_root("root")
        await rt.accept(root.session_id, "go")
        await rt.quiesce(timeout=20)
        await rt.shutdown()
        return root.session_id

    root_id = asyncio.run(go())
    accepted = [lane for name, lane in seen if name == "accept"]
    assert accepted == [root_id], seen


class _CountedReads(MemoryStore):
    reads = 0

    def read(self) -> Any:
        self.reads += 1
        return super().read()


def _two_children() -> tuple[_CountedReads, Engine, Session, tuple[str, str]]:
    """A store counting its reads, and a tree of a root and two children in it."""
    store = _CountedReads()
    engine = Engine(store, CountingIds())
    root = engine.create_root(AgentSpec("lead", "plans"))
    a, b = (engine.delegate(root.session_id, AgentSpec("lead", "plans"), task).session_id
            for task in ("one", "two"))
    return store, engine, root, (a, b)


def test_a_writer_keeps_the_trees_of_the_names_used_last_only() -> None:
    """The names' trees are kept for the last ``kept`` names: a daemon that sees sessions
    without end keeps a bounded map, and a name dropped from it is read again, rightly."""
    store, engine, root, (a, b) = _two_children()
    lane_of = tree_lanes(engine, kept=2)
    for name in (a, b, a, b):  # both kept: read once each
        assert lane_of(engine.accept, (name,)) == root.session_id
    assert store.reads == 2
    assert lane_of(engine.accept, (root.session_id,)) == root.session_id  # drops a
    assert lane_of(engine.accept, (b,)) == root.session_id  # kept
    assert store.reads == 3
    assert lane_of(engine.accept, (a,)) == root.session_id  # read again
    assert store.reads == 4


def test_a_writer_keeps_the_trees_of_the_names_used_last_not_made_first() -> None:
    """A name used again moves to the back of the map: the one dropped is the name least
    recently used, not the first one learnt."""
    store, engine, root, (a, b) = _two_children()
    lane_of = tree_lanes(engine, kept=2)
    for name in (a, b, a):  # a is now used more recently than b
        lane_of(engine.accept, (name,))
    assert lane_of(engine.accept, (root.session_id,)) == root.session_id  # drops b
    assert store.reads == 3
    assert lane_of(engine.accept, (a,)) == root.session_id  # kept
    assert store.reads == 3
    assert lane_of(engine.accept, (b,)) == root.session_id  # read again
    assert store.reads == 4


def test_an_approvals_id_names_the_tree_of_the_session_it_holds_a_call_of() -> None:
    engine = Engine(MemoryStore(), CountingIds())
    root = engine.create_root(AgentSpec("lead", "plans"))
    child = engine.delegate(root.session_id, AgentSpec("lead", "plans"), "task")
    engine.store.transact(lambda tx: tx.put_approval(Approval(
        "ap1", child.session_id, "r", "call", "send_message", {}, "ask")))
    lane_of = tree_lanes(engine)
    assert lane_of(engine.answer_approval, ("ap1", True)) == root.session_id


def test_a_call_that_names_no_session_is_given_no_tree_without_a_read() -> None:
    store = _CountedReads()
    lane_of = tree_lanes(Engine(store, CountingIds()))
    assert lane_of(Engine.sessions, (42,)) is None  # neither a name nor a context
    assert store.reads == 0


class _Unreadable(MemoryStore):
    def read(self) -> Any:
        raise StorageError("the disk is gone")


def test_a_lane_lookup_the_store_fails_takes_the_first_lane_and_leaves_the_failure_to_the_call(
) -> None:
    lane_of = tree_lanes(Engine(_Unreadable(), CountingIds()))
    assert lane_of(Engine.accept, ("s1", "x")) is None


def test_a_call_that_names_no_tree_runs_on_the_first_lane() -> None:
    writer = Writer(lanes=2, lane_of=_by_first)

    def lane(*tree: str) -> str:
        return threading.current_thread().name

    async def main() -> list[str]:
        return [await writer(lane), await writer(lane, TREE_A), await writer(lane, TREE_B)]

    try:
        first, *trees = asyncio.run(main())
    finally:
        writer.close()
    assert first == "treemail-writer"  # each lane's thread named by its number after the first
    assert sorted(trees) == ["treemail-writer", "treemail-writer-1"]


def test_one_lane_never_looks_a_calls_tree_up() -> None:
    """The lookup reads the store: with one lane every call takes it anyway."""
    asked: list[Callable[..., Any]] = []

    def lane_of(fn: Callable[..., Any], args: tuple[Any, ...]) -> Hashable | None:
        asked.append(fn)
        return None

    writer = Writer(lane_of=lane_of)
    try:
        assert asyncio.run(writer(str, 1)) == "1"
    finally:
        writer.close()
    assert asked == []
