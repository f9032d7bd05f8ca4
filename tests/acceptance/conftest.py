"""Helpers for the runtime-level acceptance tests: live runtimes on LMDB, scripted agents.

Each test is a plain function that runs one ``asyncio.run``; agents are ``Brain``s, scripted
models whose replies are functions of the conversation, and whose requests can be held at a
gate so a test can act while an agent is mid-run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ScriptedModel, ToolCall
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.config import MessagingConfig
from treemail.core.events import EventKind, Payload, read
from treemail.core.ids import CountingIds
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Event, Session

Messages = Sequence[ChatMessage]
Responder = Callable[[Messages], ModelReply]

_calls = itertools.count(1)
_namespaces = itertools.count(1)


def run(main: Callable[[], Coroutine[Any, Any, None]], timeout: float = 45.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await main()

    asyncio.run(bounded())


class Brain(ScriptedModel):
    """A scripted model. ``hold(messages)`` true keeps that request waiting until ``release``
    is set (``held`` tells the test it got there); ``pause`` runs before each reply."""

    def __init__(
        self,
        responder: Responder,
        hold: Callable[[Messages], bool] | None = None,
        pause: Callable[[Messages], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(responder)
        self.hold = hold
        self.pause = pause
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        if self.hold is not None and not self.release.is_set() and self.hold(messages):
            self.held.set()
            await self.release.wait()
        if self.pause is not None:
            await self.pause(messages)
        return await super().complete(messages, tools)

    def tools_offered(self, request: int = -1) -> list[str]:
        return [t["function"]["name"] for t in self.requests[request][1]]

    def inputs(self, request: int) -> list[str]:
        """The user messages of one request, after its last assistant message."""
        messages = self.requests[request][0]
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
        return [m["content"] for m in messages[last + 1:] if m["role"] == "user"]

    def seen(self, text: str) -> bool:
        return any(text in str(m.get("content")) for ms, _ in self.requests for m in ms)


def agent(name: str, rules: Mapping[str, str] | None, brain: Brain, prompt: str = "") -> Agent:
    return Agent(AgentSpec(name, f"the {name} agent", Rules.of(rules or {})), brain, prompt)


def open_store(path: Path) -> LmdbStore:
    return LmdbStore.open(path / "store", sync=False)


Life = Callable[[LmdbStore], Coroutine[Any, Any, None]]


def two_lives(path: Path, first: Life, second: Life) -> None:
    """Run ``first`` on a store, close it as a dead process leaves it, reopen, run ``second``."""

    async def main() -> None:
        for life in (first, second):
            store = open_store(path)
            try:
                await life(store)
            finally:
                store.close()

    run(main)


def runtime(
    store: LmdbStore,
    agents: Mapping[str, Agent],
    config: MessagingConfig | None = None,
    **options: Any,
) -> Runtime:
    # A fresh id namespace per runtime, so ids minted after a restart never collide.
    return Runtime(store, CountingIds(namespace=next(_namespaces)), agents, config, **options)


async def delegate(rt: Runtime, parent: Session, name: str, task: str,
                   *, start: bool = True) -> Session:
    """A child made as the delegate tool would; ``start=False`` leaves it queued, unstarted."""
    child: Session = await rt.writer(rt.engine.delegate, parent.session_id,
                                     rt.agent(name).spec, task)
    if start:
        rt.poke(child.session_id)
    return child


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for ``predicate``; the deadline is generous because the condition, not a time,
    is what is waited on (a loaded machine only makes it later), and its failure names the
    line of the predicate, where a bare TimeoutError would say nothing."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        code = getattr(predicate, "__code__", None)
        where = f" at {Path(code.co_filename).name}:{code.co_firstlineno}" if code else ""
        raise AssertionError(f"not true after {timeout} s: the condition{where}") from None


# -- replies -------------------------------------------------------------------------------


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(f"call-{next(_calls)}", name, arguments)


def send(to: str, body: str, mode: str | None = None) -> ToolCall:
    return call("send_message", to=to, body=body, **({"mode": mode} if mode else {}))


def reply(*calls: ToolCall, text: str | None = None) -> ModelReply:
    return ModelReply(text=text, tool_calls=calls)


def turns(messages: Messages) -> int:
    """How many replies the model gave in this conversation so far."""
    return sum(1 for m in messages if m["role"] == "assistant")


def results(messages: Messages) -> list[dict[str, Any]]:
    """Every tool result of the conversation, parsed."""
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


def on_user(table: Mapping[str, Callable[[], ModelReply]], default: str = "ok") -> Responder:
    """Reply to the last user message by the first key it contains; after a tool result, or
    for anything else, a plain ``default`` text (which ends the run)."""

    def respond(messages: Messages) -> ModelReply:
        last = messages[-1]
        if last["role"] == "user":
            for key, make in table.items():
                if key in str(last["content"]):
                    return make()
        return ModelReply(text=default)

    return respond


# -- the feed ------------------------------------------------------------------------------


def feed_kinds(rt: Runtime, kind: str, owner: str = "agent") -> Counter[str]:
    """How many times each message went through ``kind`` (e.g. ``ProducerMessageConsumed``)."""
    return Counter(
        str(event.data["message_id"])
        for _, event in rt.engine.feed()
        if event.kind == kind and event.data.get("owner") == owner
    )


def accepted_bodies(rt: Runtime, recipient: str | None = None) -> list[str]:
    return [
        str(event.data["body"])
        for _, event in rt.engine.feed()
        if event.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED and event.data.get("owner") == "agent"
        and (recipient is None or event.session_id == recipient)
    ]


def events(rt: Runtime, session: Session, kind: str) -> list[Event]:
    return [e for e in rt.engine.events(session.session_id) if e.kind == kind]


P = TypeVar("P", bound=Payload)


def payloads(rt: Runtime, session: Session, cls: type[P]) -> list[P]:
    """The typed payloads of the session's events of ``cls``'s kind, in order; an event of
    that kind that does not decode as ``cls`` fails the test."""
    found = [read(e) for e in events(rt, session, cls.KIND)]
    typed: list[P] = [p for p in found if isinstance(p, cls)]
    assert len(typed) == len(found), found
    return typed


class Recorder:
    """A plugin that records every feed event it is shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, Event]] = []

    def on_event(self, number: int, event: Event) -> None:
        self.seen.append((number, event))
