"""A session's actor: it drives the session run by run, model request by model request.

Safe boundaries fall between requests: ``begin_request`` claims whatever mail the run may
take (steered mail joins here), the model is called, and the request commits with the reply
in the same transaction. Tool calls run after the commit, so a reply's sends see the hops of
the mail that prompted it; each call's result is recorded before any wait of unknown length
(an approval), so a run that dies while waiting leaves a transcript that says what happened.

A run that ends completes the delegation (the session's first finished run) by delegation
mail to the parent; later runs, woken by mail, report nothing unless the agent sends a
message: a finished delegation is never reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from treemail.adapters.history import rebuild
from treemail.adapters.models import ModelError, ModelReply, tool_result_message
from treemail.core.engine import Request
from treemail.core.errors import TreemailError
from treemail.core.events import RecordedCall, RecordedResult, Reply
from treemail.core.lifecycle import SessionState
from treemail.core.records import Run, Session, ToolContext
from treemail.core.tools import tool_definitions

if TYPE_CHECKING:
    from treemail.adapters.runtime import Agent, Runtime

__all__ = ["Actor"]


class Actor:
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
            while not rt.closing:
                # Cleared before the state is read: a poke during the read is not lost.
                self.wake.clear()
                session: Session = await rt.writer(rt.engine.session, self.session_id)
                if session.state is SessionState.QUEUED:
                    self.busy = True
                    try:
                        await self._run(session)
                    finally:
                        self.busy = False
                    continue
                if not await self._idle():
                    return
        except asyncio.CancelledError:
            if not rt.killed:
                await self._stop()
            raise
        except Exception as crash:
            rt.crashes.append(crash)
            raise

    async def _idle(self) -> bool:
        """Wait for a poke; False once ``idle_timeout`` passed without one (evicted)."""
        try:
            async with asyncio.timeout(self.runtime.idle_timeout):
                await self.wake.wait()
        except TimeoutError:
            # A poke can land between the timeout firing and this handler running.
            if not self.wake.is_set():
                self.runtime.evicted(self)
                return False
        return True

    async def _stop(self) -> None:
        """Cancelled: interrupt the run (aborting its open request), so nothing stays claimed."""
        rt = self.runtime
        session: Session = await rt.writer(rt.engine.session, self.session_id)
        if session.state is SessionState.RUNNING and session.run_id is not None:
            # The run may have ended meanwhile; then there is nothing left to undo.
            with contextlib.suppress(TreemailError):
                await rt.writer(rt.engine.cancel_run, self.session_id, session.run_id,
                                "shutdown")

    async def _run(self, session: Session) -> None:
        rt = self.runtime
        if self.failures:
            await asyncio.sleep(min(0.05 * 2 ** self.failures, 2.0))  # back off a failing model
        run: Run = await rt.writer(rt.engine.start_run, self.session_id)
        agent = rt.agent(session.agent.name)
        history = await self._history(agent)
        while True:
            if rt.closing:  # shutdown stops a run at its next boundary
                await rt.writer(rt.engine.cancel_run, self.session_id, run.run_id, "shutdown")
                return
            request: Request = await rt.writer(rt.engine.begin_request, self.session_id,
                                               run.run_id)
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
        results: list[RecordedResult] = []
        for call in reply.tool_calls:
            outcome = await rt.tools.execute(session, run.run_id, call)
            content = outcome.content
            if outcome.approval is not None:
                await self._record(run, results)  # the wait may outlive this process
                results = []
                ctx = ToolContext(self.session_id, run.run_id, call.id)
                content = await rt.await_answer(ctx, call, outcome.approval)
            for target in outcome.stop:
                await rt.interrupted(target)
            for target in outcome.poke:
                rt.poke(target)
            results.append(RecordedResult(call.id, content))
            history.append(tool_result_message(call.id, content))
        await self._record(run, results)

    async def _record(self, run: Run, results: list[RecordedResult]) -> None:
        if results:
            rt = self.runtime
            await rt.writer(rt.engine.record_tool_results, self.session_id, run.run_id, results)

    async def _finish(self, session: Session, run: Run, reply: ModelReply) -> None:
        rt = self.runtime
        # The engine completes the delegation (first finished run only) in the same
        # transaction as the finish, so a crash cannot lose the parent's notice.
        reported = await rt.writer(rt.engine.finish_run, self.session_id, run.run_id,
                                   reply.text or "")
        if reported and session.parent_session_id is not None:
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

        def read() -> list[dict[str, Any]]:
            with rt.engine.store.read() as tx:
                return rebuild(tx, self.session_id, agent.prompt)

        return await rt.writer.quiet(read)


def _output(inputs: list[str], reply: ModelReply) -> Reply:
    return Reply(tuple(inputs), reply.text, tuple(
        RecordedCall(c.id, c.name,
                     c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments))
        for c in reply.tool_calls))
