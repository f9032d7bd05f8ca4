"""A session's actor: it drives the session run by run, model request by model request.

Safe boundaries fall between requests: ``begin_request`` claims whatever mail the run may
take (steered mail joins here), the model is called, and the request commits with the reply
in the same transaction. Tool calls run after the commit, so a reply's sends see the hops of
the mail that prompted it; each call's result is recorded before any wait of unknown length
(an approval), so a run that dies while waiting leaves a transcript that says what happened.

A run that ends completes the delegation (the session's first finished run) by delegation
mail to the parent; later runs, woken by mail, report nothing unless the agent sends a
message: a finished delegation is never reopened.

A failing model is retried under the host's ``FailurePolicy`` (``failures.py``). Anything
else that goes wrong inside a run (a bug, output the store refuses) never kills the actor:
the run is interrupted with the reason in the log, the session goes idle and stays
deliverable, and the host records the incident so tests can count them.

The actor knows its runtime only as an ``ActorHost``: the few members it uses, no import of
``runtime.py`` (which imports this module).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from treemail.adapters.runtime.budget import Budget, Meter
from treemail.adapters.runtime.failures import FailurePolicy, fault_of
from treemail.adapters.runtime.history import rebuild
from treemail.adapters.runtime.llm import (
    Model,
    ModelError,
    ModelReply,
    ToolCall,
    tool_result_message,
)
from treemail.adapters.runtime.replies import normalise
from treemail.adapters.runtime.toolbox import ToolBox
from treemail.core.engine import Engine, Request
from treemail.core.errors import ApprovalRequired, StorageError, StoreFenced, TreemailError
from treemail.core.events import Fault, RecordedCall, RecordedResult, Reply
from treemail.core.lifecycle import SessionState
from treemail.core.prompts import system_prompt
from treemail.core.records import Run, Session, ToolContext
from treemail.core.tools import tool_definitions

__all__ = ["Actor", "ActorHost", "HostedAgent", "Incident", "Jobs"]

# The library only emits records; the daemon decides where they go (``daemon/logs.py``).
_log = logging.getLogger("treemail.runtime")

T = TypeVar("T")


class Jobs(Protocol):
    """The store's single writer thread: ``__call__`` for writes, ``quiet`` for reads."""

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]: ...

    def quiet(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]: ...


class HostedAgent(Protocol):
    @property
    def model(self) -> Model: ...

    @property
    def prompt(self) -> str: ...

    @property
    def messaging(self) -> str | None: ...


class Incident(Exception):
    """A run an actor had to stop because of an unexpected error (kept, never raised)."""

    def __init__(self, session_id: str, reason: str, error: BaseException) -> None:
        super().__init__(f"session {session_id}: {reason}")
        self.session_id = session_id
        self.reason = reason
        self.error = error


class ActorHost(Protocol):
    """What an actor needs from its runtime."""

    @property
    def engine(self) -> Engine: ...

    @property
    def writer(self) -> Jobs: ...

    @property
    def tools(self) -> ToolBox: ...

    @property
    def failure_policy(self) -> FailurePolicy: ...

    @property
    def idle_timeout(self) -> float: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def closing(self) -> bool: ...

    @property
    def killed(self) -> bool: ...

    def agent(self, name: str) -> HostedAgent: ...

    def poke(self, session_id: str) -> None: ...

    async def interrupted(self, session_id: str) -> None: ...

    async def await_answer(self, ctx: ToolContext, call: ToolCall,
                           waiting: ApprovalRequired) -> str: ...

    def evicted(self, actor: Actor) -> None: ...

    def crashed(self, error: BaseException) -> None: ...

    def incident(self, incident: Incident) -> None: ...


class Actor:
    def __init__(self, host: ActorHost, session_id: str) -> None:
        self.host = host
        self.session_id = session_id
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] = None  # type: ignore[assignment]  # set by poke
        self.busy = False
        self.failures = 0  # consecutive failed model calls
        # Set by a cancel from outside, which ends the run itself: a cancelled actor must
        # not also interrupt it (with another reason, waking the session again).
        self.silenced = False

    async def live(self) -> None:
        host = self.host
        try:
            while not host.closing:
                # Cleared before the state is read: a poke during the read is not lost.
                self.wake.clear()
                session: Session = await host.writer(host.engine.session, self.session_id)
                if session.state is SessionState.QUEUED:
                    self.busy = True
                    try:
                        await self._guarded(session)
                    finally:
                        self.busy = False
                    continue
                if not await self._idle():
                    return
        except asyncio.CancelledError:
            if not host.killed and not self.silenced:
                await self._stop()
            raise
        except Exception as crash:
            host.crashed(crash)
            raise

    async def _guarded(self, session: Session) -> None:
        """Run; an unexpected error interrupts the run instead of killing the actor."""
        try:
            await self._run(session)
        except StoreFenced as error:
            self._fenced(error)
        except StorageError as error:  # the store went away (a restart)
            await self._outlast(session, error)
        except Exception as error:  # every error must end the run, logged
            await self._give_up(session, f"actor error: {_describe(error)}", error)

    def _fenced(self, error: StoreFenced) -> None:
        """The store refused a write into this session's tree: the tree is not this
        daemon's (taken over, its lease lapsed, or dropped). Nothing more is written into
        it from here; the run, as it stands, is the tree's next owner's to recover (this
        daemon again, once it claims the tree back), as after a crash."""
        _log.warning("session %s: its tree is not this daemon's now (%s); its run is left "
                     "to the tree's owner to recover", self.session_id, error)

    async def _outlast(self, session: Session, error: StorageError) -> None:
        """The store failed under the run: once it answers again, interrupt the run as a
        restart would (claimed mail released, the session queued again if mail waits), so
        nothing stays claimed by a run that can no longer finish. If the tree turns out
        to be another's meanwhile (fenced), its owner's recovery interrupts the run."""
        host, pause = self.host, 0.05
        _log.warning("session %s: the store failed under its run (%s); interrupting it once "
                     "the store answers", self.session_id, error)
        while not host.closing:
            try:
                current: Session = await host.writer(host.engine.session, self.session_id)
                if current.run_id is not None and current.state in (SessionState.QUEUED,
                                                                    SessionState.RUNNING):
                    await host.writer(host.engine.cancel_run, self.session_id,
                                      current.run_id, f"the store failed: {error.code}")
                return
            except StoreFenced as fenced:
                self._fenced(fenced)
                return
            except StorageError:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _idle(self) -> bool:
        """Wait for a poke; False once ``idle_timeout`` passed without one (evicted)."""
        try:
            async with asyncio.timeout(self.host.idle_timeout):
                await self.wake.wait()
        except TimeoutError:
            # A poke can land between the timeout firing and this handler running.
            if not self.wake.is_set():
                self.host.evicted(self)
                return False
        return True

    async def _stop(self) -> None:
        """Cancelled: interrupt the run (aborting its open request), so nothing stays claimed."""
        host = self.host
        session: Session = await host.writer(host.engine.session, self.session_id)
        if session.state is SessionState.RUNNING and session.run_id is not None:
            # The run may have ended meanwhile; then there is nothing left to undo.
            with contextlib.suppress(TreemailError):
                await host.writer(host.engine.cancel_run, self.session_id, session.run_id,
                                  "shutdown")

    async def _run(self, session: Session) -> None:
        host = self.host
        await host.failure_policy.back_off(self.failures)
        run: Run = await host.writer(host.engine.start_run, self.session_id)
        agent = host.agent(session.agent.name)
        can_send = "send_message" in host.tools.visible(session)
        history = await self._history(
            system_prompt(agent.prompt, agent.messaging, session.reference, can_send=can_send))
        meter = Meter(host.budget)
        while True:
            if host.closing:  # shutdown stops a run at its next boundary
                await host.writer(host.engine.cancel_run, self.session_id, run.run_id,
                                  "shutdown")
                return
            if spent := meter.model_request():
                await self._over_budget(session, run, spent)
                return
            request: Request = await host.writer(host.engine.begin_request, self.session_id,
                                                 run.run_id)
            inputs = [d.text for d in request.deliveries]
            history.extend({"role": "user", "content": text} for text in inputs)
            try:
                reply = await agent.model.complete(
                    history, tool_definitions(host.tools.visible(session)))
            except ModelError as error:
                await self._failed(session, run, request, error)
                return
            reply = normalise(reply)  # storable before anything durable sees it
            self.failures = 0
            await host.writer(host.engine.commit_request, self.session_id, run.run_id,
                              request.request_id, _output(inputs, reply))
            history.append(reply.as_message())
            if not reply.tool_calls:
                await self._finish(session, run, reply)
                return
            if spent := await self._tools(session, run, reply, history, meter):
                await self._over_budget(session, run, spent)
                return

    async def _tools(
        self, session: Session, run: Run, reply: ModelReply, history: list[dict[str, Any]],
        meter: Meter,
    ) -> str | None:
        """Run the reply's tool calls in order and record their results; the reason the run
        must end instead when its tool-call budget runs out (calls after that one are not
        run: the rebuilt history says the run ended before they returned)."""
        host = self.host
        results: list[RecordedResult] = []
        for call in reply.tool_calls:
            if spent := meter.tool_call():
                await self._record(run, results)
                return spent
            outcome = await host.tools.execute(session, run.run_id, call)
            content = outcome.content
            if outcome.failure is not None:
                host.incident(Incident(self.session_id, content, outcome.failure))
            if outcome.approval is not None:
                await self._record(run, results)  # the wait may outlive this process
                results = []
                ctx = ToolContext(self.session_id, run.run_id, call.id)
                content = await host.await_answer(ctx, call, outcome.approval)
            for target in outcome.stop:
                await host.interrupted(target)
            for target in outcome.poke:
                host.poke(target)
            results.append(RecordedResult(call.id, content))
            history.append(tool_result_message(call.id, content))
        await self._record(run, results)
        return None

    async def _over_budget(self, session: Session, run: Run, reason: str) -> None:
        """The run spent its budget: interrupt it and leave the session idle until new input
        (queued again, a looping model would only loop again); a delegating parent is told."""
        host = self.host
        _log.warning("session %s: %s", self.session_id, reason)
        told = await host.writer(host.engine.give_up_run, self.session_id, run.run_id, reason)
        if told and session.parent_session_id is not None:
            host.poke(session.parent_session_id)

    async def _record(self, run: Run, results: list[RecordedResult]) -> None:
        if results:
            host = self.host
            await host.writer(host.engine.record_tool_results, self.session_id, run.run_id,
                              results)

    async def _finish(self, session: Session, run: Run, reply: ModelReply) -> None:
        host = self.host
        # The engine completes the delegation (first finished run only) in the same
        # transaction as the finish, so a crash cannot lose the parent's notice.
        reported = await host.writer(host.engine.finish_run, self.session_id, run.run_id,
                                     reply.text or "")
        if reported and session.parent_session_id is not None:
            host.poke(session.parent_session_id)

    async def _failed(self, session: Session, run: Run, request: Request,
                      error: ModelError) -> None:
        """The request did not commit: its mail is released and the run interrupted. Under
        the policy's limit the session is queued again (and backs off); at the limit the
        actor gives up until new input."""
        host = self.host
        self.failures += 1
        policy = host.failure_policy
        await host.writer(host.engine.abort_request, self.session_id, run.run_id,
                          request.request_id)
        reason = policy.reason(self.failures, error)
        fault = fault_of(error)
        if policy.exhausted(self.failures):
            await self._give_up(session, reason, error, fault)
        else:
            _log.warning("session %s: %s (retrying)", self.session_id, reason)
            await host.writer(host.engine.cancel_run, self.session_id, run.run_id, reason,
                              fault)

    async def _give_up(self, session: Session, reason: str, error: BaseException,
                       fault: Fault | None = None) -> None:
        """Interrupt the session's run, leave it idle until new input, tell a delegating
        parent, and record the incident; a run already ended is left as it is."""
        host = self.host
        self.failures = 0  # new input gets the policy's full count again
        host.incident(Incident(self.session_id, reason, error))
        current: Session = await host.writer(host.engine.session, self.session_id)
        if current.run_id is None or current.state not in (SessionState.QUEUED,
                                                           SessionState.RUNNING):
            return
        told = await host.writer(host.engine.give_up_run, self.session_id, current.run_id,
                                 reason, fault)
        if told and session.parent_session_id is not None:
            host.poke(session.parent_session_id)

    async def _history(self, prompt: str) -> list[dict[str, Any]]:
        """The conversation so far, rebuilt from the durable log (survives eviction and restart)."""
        host = self.host

        def read() -> list[dict[str, Any]]:
            with host.engine.store.read() as tx:
                return rebuild(tx, self.session_id, prompt)

        return await host.writer.quiet(read)


def _describe(error: BaseException) -> str:
    """An error as one storable line: type and message, lone surrogates replaced, bounded."""
    text = f"{type(error).__name__}: {error}"
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= 300 else text[:300] + "..."


def _output(inputs: Sequence[str], reply: ModelReply) -> Reply:
    return Reply(tuple(inputs), reply.text, tuple(
        RecordedCall(c.id, c.name,
                     c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments))
        for c in reply.tool_calls))
