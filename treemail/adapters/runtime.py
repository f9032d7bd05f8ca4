"""The asyncio runtime: each session an actor, every engine call on one writer thread.

An actor drives its session run by run, model request by model request. Safe boundaries fall
between requests: ``begin_request`` claims whatever mail the run may take (steered mail joins
here), the model is called, and the request commits with the reply in the same transaction.
Tool calls run after the commit, so a reply's sends see the hops of the mail that prompted it.

Every engine call goes through ``Writer``: one thread owns the store, so LMDB's single-writer
rule holds and no fsync ever blocks the event loop. Mail to a session pokes its actor; an actor
idle for ``idle_timeout`` is evicted and spawned again by the next poke. A run that ends
completes the delegation (its first run) by delegation mail to the parent; later runs, woken by
mail, report nothing unless the agent sends a message.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

from treemail.adapters.models import Model, ModelError, ModelReply, tool_result_message
from treemail.adapters.toolbox import Hooks, ToolBox
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine, Request
from treemail.core.errors import EngineShutdown
from treemail.core.ids import IdSource
from treemail.core.records import AgentSpec, Event, Owner, Run, Session
from treemail.core.store import Store
from treemail.core.tools import tool_definitions

__all__ = ["Agent", "Runtime", "Writer"]

T = TypeVar("T")


class Writer:
    """One thread for every engine call: the store's single writer, off the event loop."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="treemail-writer")

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@attrs.frozen
class Agent:
    """An agent the runtime can run: its spec (name, rules), model and system prompt."""

    spec: AgentSpec
    model: Model
    prompt: str = ""


class Runtime:
    def __init__(
        self,
        store: Store,
        ids: IdSource,
        agents: Mapping[str, Agent],
        config: MessagingConfig | None = None,
        *,
        idle_timeout: float = 30.0,
        hooks: Hooks | None = None,
        max_model_failures: int = 3,
    ) -> None:
        self.engine = Engine(store, ids, config)
        self.agents = dict(agents)
        self.writer = Writer()
        self.tools = ToolBox(self.engine, self.writer,
                             {name: a.spec for name, a in agents.items()}, hooks)
        self.idle_timeout = idle_timeout
        self.max_model_failures = max_model_failures
        self._actors: dict[str, _Actor] = {}
        self._closing = False
        self.evictions = 0
        # An actor that dies of a bug must not vanish silently: quiesce re-raises it.
        self.crashes: list[BaseException] = []

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> int:
        """Recover the store (dead runs interrupted, mail made deliverable) and spawn actors."""
        dead: int = await self.writer(self.engine.recover)
        for session in await self.writer(self.engine.sessions):
            if session.state == "queued":
                self.poke(session.session_id)
        return dead

    async def shutdown(self) -> None:
        """Refuse new sends, stop every actor at a boundary, and leave the store consistent."""
        self._closing = True
        self.engine.shutdown()
        actors = list(self._actors.values())
        for actor in actors:
            actor.task.cancel()
        await asyncio.gather(*(a.task for a in actors), return_exceptions=True)
        self.writer.close()

    def resident(self, session_id: str) -> bool:
        """Whether the session's actor is in memory (not evicted)."""
        return session_id in self._actors

    # -- entry points ----------------------------------------------------------------------

    async def create_root(self, agent: str) -> Session:
        session: Session = await self.writer(self.engine.create_root, self._agent(agent).spec)
        return session

    async def submit(self, session_id: str, text: str, owner: Owner = Owner.USER) -> str:
        """User (or plugin) input: durable mail that wakes the session."""
        if self._closing:
            raise EngineShutdown("the runtime is shutting down; nothing was accepted")
        message_id: str = await self.writer(self.engine.produce, session_id, text, owner)
        self.poke(session_id)
        return message_id

    def poke(self, session_id: str) -> None:
        """Tell a session it may have work; spawn its actor if it was evicted."""
        if self._closing:
            return
        actor = self._actors.get(session_id)
        if actor is None or actor.task.done():
            actor = _Actor(self, session_id)
            self._actors[session_id] = actor
            actor.task = asyncio.create_task(actor.live(), name=f"actor {session_id}")
        actor.wake.set()

    async def quiesce(self, timeout: float = 30.0) -> None:
        """Wait until no session has a queued or running run and no actor is busy."""
        async with asyncio.timeout(timeout):
            while True:
                if self.crashes:
                    raise self.crashes[0]
                sessions: list[Session] = await self.writer(self.engine.sessions)
                busy = [a for a in self._actors.values() if a.busy]
                if not busy and all(s.state in ("idle", "finished") for s in sessions):
                    return
                await asyncio.sleep(0.01)

    def _agent(self, name: str) -> Agent:
        agent = self.agents.get(name)
        if agent is None:
            raise KeyError(f"no agent {name!r}; known agents: {', '.join(self.agents)}")
        return agent

    def _evicted(self, actor: _Actor) -> None:
        if self._actors.get(actor.session_id) is actor:
            del self._actors[actor.session_id]
            self.evictions += 1


class _Actor:
    def __init__(self, runtime: Runtime, session_id: str) -> None:
        self.runtime = runtime
        self.session_id = session_id
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] = None  # type: ignore[assignment]  # set by poke
        self.busy = False
        self.failures = 0

    async def live(self) -> None:
        rt = self.runtime
        try:
            while True:
                session: Session = await rt.writer(rt.engine.session, self.session_id)
                if session.state == "queued":
                    self.busy = True
                    try:
                        await self._run(session)
                    finally:
                        self.busy = False
                    continue
                self.wake.clear()
                try:
                    async with asyncio.timeout(rt.idle_timeout):
                        await self.wake.wait()
                except TimeoutError:
                    rt._evicted(self)
                    return
        except asyncio.CancelledError:
            await self._stop()
            raise
        except Exception as crash:
            rt.crashes.append(crash)
            raise

    async def _stop(self) -> None:
        """Shutdown: abort the open request and interrupt the run, so nothing stays claimed."""
        rt = self.runtime
        session: Session = await rt.writer(rt.engine.session, self.session_id)
        if session.state == "running" and session.run_id is not None:
            await rt.writer(rt.engine.cancel_run, self.session_id, session.run_id, "shutdown")

    async def _run(self, session: Session) -> None:
        rt = self.runtime
        if self.failures:
            await asyncio.sleep(min(0.05 * 2 ** self.failures, 2.0))  # back off a failing model
        run: Run = await rt.writer(rt.engine.start_run, self.session_id)
        agent = rt._agent(session.agent.name)
        history = await self._history(agent)
        while True:
            request: Request = await rt.writer(rt.engine.begin_request, self.session_id, run.run_id)
            inputs = [d.text for d in request.deliveries]
            history.extend({"role": "user", "content": text} for text in inputs)
            try:
                reply = await agent.model.complete(
                    history, tool_definitions(rt.tools.visible(session)))
            except ModelError as error:
                await self._failed(run, request, error)
                return
            self.failures = 0
            await rt.writer(rt.engine.commit_request, self.session_id, run.run_id,
                            request.request_id, _output(inputs, reply))
            history.append(reply.as_message())
            if not reply.tool_calls:
                await self._finish(session, run, reply)
                return
            await self._tools(session, run, reply, history)

    async def _tools(
        self, session: Session, run: Run, reply: ModelReply, history: list[dict[str, Any]]
    ) -> None:
        rt = self.runtime
        results = []
        for call in reply.tool_calls:
            outcome = await rt.tools.execute(session, run.run_id, call)
            for target in outcome.poke:
                rt.poke(target)
            results.append({"tool_call_id": outcome.call_id, "content": outcome.content})
            history.append(tool_result_message(outcome.call_id, outcome.content))
        await rt.writer(rt.engine.record_tool_results, self.session_id, run.run_id, results)

    async def _finish(self, session: Session, run: Run, reply: ModelReply) -> None:
        rt = self.runtime
        await rt.writer(rt.engine.finish_run, self.session_id, run.run_id)
        # Only the delegated run completes the delegation; a woken session reports nothing
        # unless it sends a message itself.
        if session.parent_session_id is not None and run.number == 1:
            notice = (f'<subagent_result from="{session.reference}">\n{reply.text or ""}\n'
                      "</subagent_result>")
            await rt.writer(rt.engine.produce, session.parent_session_id, notice,
                            Owner.DELEGATION, sender=session.session_id)
            rt.poke(session.parent_session_id)

    async def _failed(self, run: Run, request: Request, error: ModelError) -> None:
        """The request did not commit: its mail is released, and the run interrupted; the
        session is woken again (after a back-off) while mail is pending."""
        rt = self.runtime
        self.failures += 1
        await rt.writer(rt.engine.abort_request, self.session_id, run.run_id, request.request_id)
        reason = f"model error: {error.code}"
        if self.failures >= rt.max_model_failures:
            reason = f"model failed {self.failures} times: {error.code}"
        await rt.writer(rt.engine.cancel_run, self.session_id, run.run_id, reason)

    async def _history(self, agent: Agent) -> list[dict[str, Any]]:
        """The conversation so far, rebuilt from the durable log (survives eviction and restart)."""
        rt = self.runtime
        events: list[Event] = await rt.writer(rt.engine.events, self.session_id)
        history: list[dict[str, Any]] = []
        if agent.prompt:
            history.append({"role": "system", "content": agent.prompt})
        for event in events:
            history.extend(_replay(event))
        return history


def _output(inputs: list[str], reply: ModelReply) -> dict[str, object]:
    return {
        "inputs": inputs,
        "text": reply.text,
        "tool_calls": [
            {"id": c.id, "name": c.name,
             "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)}
            for c in reply.tool_calls
        ],
    }


def _replay(event: Event) -> list[dict[str, Any]]:
    if event.kind == "ModelOutput":
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": text} for text in _list(event.data.get("inputs"))
        ]
        assistant: dict[str, Any] = {"role": "assistant", "content": event.data.get("text")}
        calls = _list(event.data.get("tool_calls"))
        if calls:
            assistant["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ]
        return [*messages, assistant]
    if event.kind == "ToolResults":
        return [tool_result_message(r["tool_call_id"], r["content"])
                for r in _list(event.data.get("results"))]
    return []


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []

