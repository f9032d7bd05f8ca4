"""The reference model: the whole messaging contract as a small, pure, obviously correct program.

It offers the engine's operations with the engine's signatures and answers each with a value or
the error class the engine must raise, so a differential test can run both side by side. It
shares no decision code with the engine: lifecycles, guards, addressing, permissions and
delivery are re-stated (here and in ``world``) from the contract and design.md, and every
limit is checked by recounting the world.

Ids are minted from the model's own ``CountingIds`` in the order the engine mints them
(session; child then delegation mail; outside mail; woken run; request; sent mail), so the
two can be compared id for id. Every operation is all or nothing: on an error the world is put
back as it was (ids already minted stay spent, as in the engine).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TypeVar

from treemail.core import errors
from treemail.core.clock import Clock, ManualClock
from treemail.core.config import MessagingConfig
from treemail.core.ids import CountingIds, make_handle
from treemail.core.lifecycle import (
    MessageState,
    MessageTrigger,
    RequestTrigger,
    RunState,
    RunTrigger,
    SessionState,
    SessionTrigger,
)
from treemail.core.records import (
    AgentSpec,
    GrantScope,
    Mode,
    Owner,
    RecipientState,
    SendResult,
    ToolContext,
)
from treemail.models import approvals, external, receipts
from treemail.models.world import (
    MESSAGE_STEPS,
    REQUEST_STEPS,
    RUN_STEPS,
    SESSION_STEPS,
    ApprovalRecord,
    Catalogue,
    MessageRecord,
    RunRecord,
    SessionRecord,
    World,
    can_send,
    interrupted_notice,
    judge_send,
    recipient_state,
    rules_now,
    step,
)

__all__ = ["Delivered", "Reference"]

# The contract's numbers: plugin mail is at most 256 KiB of UTF-8, and a producer's
# idempotency key at most 256 bytes of printable text.
PLUGIN_CAP = 256 * 1024
MAX_KEY_BYTES = 256

T = TypeVar("T")

# (request id, run id, ((message id, owner, text the model sees), ...))
Delivered = tuple[str, str, tuple[tuple[str, Owner, str], ...]]


class Reference:
    def __init__(self, config: MessagingConfig, ids: CountingIds | None = None,
                 agents: Catalogue | None = None, clock: Clock | None = None) -> None:
        self.agents = agents  # the agents' current docs; not part of the durable world
        self.config = config
        self.ids = ids if ids is not None else CountingIds()
        self.world = World()
        self.shut = False
        self.clock = clock if clock is not None else ManualClock()

    def _atomic(self, work: Callable[[], T]) -> T:
        before = copy.deepcopy(self.world)
        try:
            return work()
        except errors.TreemailError:
            self.world = before
            raise

    # -- sessions and outside mail -------------------------------------------------------------

    def create_root(self, agent: AgentSpec, *, legacy: bool = False) -> str:
        return self._atomic(lambda: self._new_session(agent, None, legacy).session_id)

    def delegate(self, parent_id: str, agent: AgentSpec, task: str, *, legacy: bool = False) -> str:
        if task.strip() == "":
            raise errors.InvalidRequest("a delegation must carry a task")

        def work() -> str:
            parent = self._session(parent_id)
            child = self._new_session(agent, parent, legacy)
            self._accept(child.session_id, parent.session_id, Owner.DELEGATION, task, Mode.QUEUE, 0)
            return child.session_id

        child_id = self._atomic(work)
        self._wake(child_id)
        return child_id

    def accept(self, recipient: str, body: str, owner: Owner, *, sender: str | None = None,
               mode: Mode = Mode.QUEUE, key: str | None = None) -> str:
        """Outside mail. With a key: the first accept under (recipient, owner, key) is kept
        with its mail; the same mail again gets that accept back and changes nothing, other
        mail under the key is refused."""
        if owner is Owner.AGENT:
            raise errors.InvalidRequest("agent mail goes through send_message")
        if body.strip() == "":
            raise errors.InvalidRequest("empty mail")
        if owner is Owner.PLUGIN and len(body.encode("utf-8", "surrogatepass")) > PLUGIN_CAP:
            raise errors.PluginBodyTooLarge("plugin mail over 256 KiB")
        if key is not None and (key == "" or not key.isprintable()
                                or len(key.encode("utf-8")) > MAX_KEY_BYTES):
            raise errors.InvalidRequest("a key is printable text of 1 to 256 bytes")
        keyed = None if key is None else (recipient, owner, key)
        if keyed is not None and keyed in self.world.produced:
            first, mail = self.world.produced[keyed]
            if mail != (body, mode, sender):
                raise errors.ProducerKeyConflict("the key was used for other mail")
            return first

        def work() -> str:
            self._session(recipient)
            message_id = self._accept(recipient, sender, owner, body, mode, 0).message_id
            if keyed is not None:
                self.world.produced[keyed] = (message_id, (body, mode, sender))
            return message_id

        message_id = self._atomic(work)
        self._wake(recipient)
        return message_id

    def _new_session(
        self, agent: AgentSpec, parent: SessionRecord | None, legacy: bool
    ) -> SessionRecord:
        session_id = self.ids.new_id()
        handle = None if legacy else make_handle(agent.name, session_id)
        root = session_id if parent is None else parent.root_session_id
        if handle is not None and any(s.handle == handle and s.live
                                      for s in self.world.tree_of(root)):
            raise errors.InvalidRequest(f"handle {handle} taken")
        session = SessionRecord(
            session_id, root, None if parent is None else parent.session_id, agent, handle,
            ordinal=len(self.world.sessions) + 1,
        )
        self.world.sessions[session_id] = session
        return session

    def _accept(
        self, recipient: str, sender: str | None, owner: Owner, body: str, mode: Mode, hop: int
    ) -> MessageRecord:
        if any("\ud800" <= char <= "\udfff" for char in body):
            raise errors.InvalidRequest("mail holding a lone surrogate is not stored")
        message = MessageRecord(
            self.ids.new_id(), recipient, sender, owner, body, mode, hop,
            seq=self.world.next_seq(recipient),
        )
        self.world.messages[message.message_id] = message
        return message

    def revert(self, session_id: str) -> list[str]:
        """The session and all its descendants become ghosts: reachable by UUID only."""

        def work() -> list[str]:
            target = self._session(session_id)
            branch = [target.session_id]
            for session in self.world.tree_of(target.root_session_id):  # parents come first
                if session.parent_session_id in branch:
                    branch.append(session.session_id)
            ghosts = [sid for sid in branch if self.world.sessions[sid].live]
            for sid in ghosts:
                self.world.sessions[sid].live = False
            return ghosts

        return self._atomic(work)

    # -- send_message, grants and approvals ------------------------------------------------------

    def send_message(self, ctx: ToolContext, arguments: object) -> SendResult:
        if self.shut:
            raise errors.EngineShutdown("shutting down")
        result, recipient, replayed = self._atomic(lambda: self._send(ctx, arguments))
        # Only a recipient without a run needs waking; one with a run takes its mail in
        # itself, when that run starts or reaches its next boundary.
        if not replayed and self.world.sessions[recipient].state in _NO_RUN:
            self._wake(recipient)
        return result

    def _send(
        self, ctx: ToolContext, arguments: object, approved: bool = False
    ) -> tuple[SendResult, str, bool]:
        verdict = judge_send(self.world, self.config, ctx, arguments, approved,
                             self.agents)
        recipient = verdict.recipient
        if verdict.replay is not None:
            return verdict.replay, recipient.session_id, True
        if verdict.spend is not None:
            self.world.grants.remove(verdict.spend)  # a once-grant is spent by its send
        state = recipient_state(recipient)
        effective = verdict.mode if state is RecipientState.RUNNING else Mode.QUEUE
        message = self._accept(recipient.session_id, verdict.sender.session_id, Owner.AGENT,
                               verdict.body, verdict.mode, verdict.hop)
        receipts.stamp(message, self._now())  # an approved send too: its age starts here
        result = SendResult(message.message_id, effective, state)
        call = (ctx.session_id, ctx.run_id, ctx.tool_call_id)
        self.world.results[call] = result
        self.world.calls[call] = (verdict.to, verdict.body, verdict.mode)
        return result, recipient.session_id, False

    def grant(self, scope: str, subject: str, label: str) -> None:
        approvals.grant(self, scope, subject, label)

    def tool_visible(self, session_id: str) -> bool:
        return can_send(rules_now(self.agents, self._session(session_id)))

    def hold_for_approval(
        self, ctx: ToolContext, tool: str, arguments: Mapping[str, object], label: str
    ) -> ApprovalRecord:
        return approvals.hold(self, ctx, tool, arguments, label)

    def answer_approval(self, approval_id: str, approve: bool, scope: str = GrantScope.ONCE
                        ) -> ApprovalRecord:
        return approvals.answer(self, approval_id, approve, scope)

    # -- runs and requests ---------------------------------------------------------------------

    def reconcile(self, session_id: str) -> None:
        """Expire stale mail first (``receipts``), then reconcile."""
        now = self._now()

        def work() -> None:
            self._expire(session_id, now)
            self._reconcile(session_id)

        self._atomic(work)

    def _wake(self, session_id: str) -> None:
        """The reconcile inside another operation: it expires nothing."""
        self._atomic(lambda: self._reconcile(session_id))

    def _reconcile(self, session_id: str) -> None:
        """Admit accepted mail; a session with mail for its next run and no run gets one."""
        session = self._session(session_id)
        self._admit(session)
        if session.state in _NO_RUN and self.world.waiting_for(session_id, None):
            run = RunRecord(self.ids.new_id(), session_id, self.world.next_run_number(session_id))
            self.world.runs[run.run_id] = run
            self._step_session(session, SessionTrigger.ENQUEUE, run)

    def _admit(self, session: SessionRecord) -> None:
        """Steer mail joins a running run; everything else waits for the next run."""
        run = self.world.runs[session.run_id] if session.run_id is not None else None
        running = run if run is not None and run.status == RunState.RUNNING else None
        for message in self.world.pending_of(session.session_id):
            if message.state == MessageState.ACCEPTED:
                self._step_message(message, MessageTrigger.ADMIT)
                joins = running is not None and message.mode is Mode.STEER
                message.run_id = running.run_id if running is not None and joins else None

    def start_run(self, session_id: str) -> str:
        return self._atomic(lambda: self._start(session_id))

    def _start(self, session_id: str) -> str:
        session = self._session(session_id)
        step(SESSION_STEPS, f"session {session_id}", session.state, SessionTrigger.START)
        assert session.run_id is not None
        run = self.world.runs[session.run_id]
        self._admit(session)  # mail accepted while queued belongs to this run
        run.status = step(RUN_STEPS, f"run {run.run_id}", run.status, RunTrigger.START)
        self._step_session(session, SessionTrigger.START, run)
        for message in self.world.waiting_for(session_id, None):
            message.run_id = run.run_id
        return run.run_id

    # -- external sessions (spec/external.md): an MCP call is the request boundary ----------

    def attach(self, parent_id: str, agent: AgentSpec) -> str:
        return external.attach(self, parent_id, agent)

    def external_check(self, session_id: str) -> Delivered | None:
        return external.check(self, session_id)

    def external_settle(self, session_id: str, run_id: str, request_id: str,
                        committed: bool) -> bool:
        return external.settle(self, session_id, run_id, request_id, committed)

    def external_turn_run(self, session_id: str) -> str:
        return external.turn_run(self, session_id)

    def begin_request(self, session_id: str, run_id: str) -> Delivered:
        return self._atomic(lambda: self._begin(session_id, run_id, expire=True))

    def _begin(self, session_id: str, run_id: str, expire: bool = False) -> Delivered:
        session, run = self._live_run(session_id, run_id)
        step(REQUEST_STEPS, f"run {run_id}", run.request, RequestTrigger.BEGIN_REQUEST)
        now = self._now()
        if expire:  # a boundary; check_mail expired its stale mail before it came here
            self._expire(session_id, now)
        self._admit(session)
        request_id = self.ids.new_id()
        claimed = self.world.waiting_for(session_id, run_id)
        for message in claimed:
            self._step_message(message, MessageTrigger.CLAIM)
            receipts.on_claim(message, now)
            message.request_id = request_id
        run.open_request = request_id
        texts = tuple((m.message_id, m.owner, self.world.text_for(session, m, self.agents))
                      for m in claimed)
        return request_id, run_id, texts

    def commit_request(self, session_id: str, run_id: str, request_id: str) -> None:
        self._atomic(lambda: self._close(session_id, run_id, request_id, True))

    def abort_request(self, session_id: str, run_id: str, request_id: str) -> None:
        self._atomic(lambda: self._close(session_id, run_id, request_id, False))

    def _close(self, session_id: str, run_id: str, request_id: str, committed: bool) -> None:
        _, run = self._live_run(session_id, run_id)
        if run.open_request != request_id:
            raise errors.UnknownTarget("not the open request")
        self._settle(run, committed)

    def _settle(self, run: RunRecord, committed: bool) -> None:
        """Committed: the request's mail is consumed. Aborted: it is released, still bound to
        the run, for the next boundary."""
        for message in self.world.pending_of(run.session_id):
            if message.state == MessageState.CLAIMED and message.request_id == run.open_request:
                self._step_message(
                    message, MessageTrigger.CONSUME if committed else MessageTrigger.RELEASE)
                if not committed:
                    message.request_id = None
                    receipts.on_release(message, self._now())
        step(REQUEST_STEPS, f"run {run.run_id}", run.request,
             RequestTrigger.COMMIT_REQUEST if committed else RequestTrigger.ABORT_REQUEST)
        run.open_request = None

    def finish_run(self, session_id: str, run_id: str, result: str | None = None) -> bool:
        """With a result, a delegated session's first such finish reports it to the parent as
        delegation mail; returns whether it did."""

        def work() -> bool:
            self._end_run(session_id, run_id, RunTrigger.FINISH)
            child = self.world.sessions[session_id]
            parent = child.parent_session_id
            if result is None or parent is None or session_id in self.world.reported:
                return False
            self.world.reported.add(session_id)
            # Kept as the child wrote it; the parent is shown it in a notice (text_for).
            self._accept(parent, session_id, Owner.DELEGATION, result, Mode.QUEUE, 0)
            self._reconcile(parent)
            return True

        return self._atomic(work)

    def cancel_run(self, session_id: str, run_id: str, reason: str = "cancelled") -> None:
        self._atomic(lambda: self._end_run(session_id, run_id, RunTrigger.INTERRUPT))

    def give_up_run(self, session_id: str, run_id: str, reason: str) -> bool:
        """The run is interrupted and, unlike a cancel, nothing wakes the session: it stays
        idle with its mail until new input arrives. A delegated session's parent is told
        why; the delegation stays open (a later finish still reports). Returns whether a
        parent was told."""

        def work() -> bool:
            session = self._session(session_id)
            if session.run_id != run_id:
                raise errors.UnknownTarget("not the current run")
            self._end(session, self.world.runs[run_id], RunTrigger.INTERRUPT)
            parent = session.parent_session_id
            if parent is None:
                return False
            self._accept(parent, session_id, Owner.DELEGATION, interrupted_notice(reason),
                         Mode.QUEUE, 0)
            self._reconcile(parent)
            return True

        return self._atomic(work)

    def _end_run(self, session_id: str, run_id: str, trigger: RunTrigger) -> None:
        session = self._session(session_id)
        if session.run_id != run_id:
            raise errors.UnknownTarget("not the current run")
        self._end(session, self.world.runs[run_id], trigger)
        self._reconcile(session_id)

    def _end(self, session: SessionRecord, run: RunRecord, trigger: RunTrigger) -> None:
        """A run ends: an open request is aborted first (a finish with one open is an error);
        mail that was bound to the run but never claimed waits for the next run."""
        if run.open_request is not None and trigger is RunTrigger.INTERRUPT:
            self._settle(run, committed=False)
        step(REQUEST_STEPS, f"run {run.run_id}", run.request, RequestTrigger.END)
        self._step_session(session, trigger.session, run)
        run.status = step(RUN_STEPS, f"run {run.run_id}", run.status, trigger)
        for message in self.world.waiting_for(session.session_id, run.run_id):
            message.run_id = None

    def discard(self, message_id: str, reason: str) -> None:
        if reason == "" or reason.isspace():
            raise errors.InvalidRequest("a discard needs a reason")

        def work() -> None:
            message = self.world.messages.get(message_id)
            if message is None:
                raise errors.UnknownTarget("no such message")
            self._step_message(message, MessageTrigger.DISCARD)
            message.run_id = None
            message.reason = reason

        self._atomic(work)

    # -- receipts, recall and expiry (``receipts``) ---------------------------------------------

    def message_status(self, session_id: str, message_id: str) -> receipts.Status:
        return receipts.status(self, session_id, message_id)

    def cancel_message(self, session_id: str, message_id: str) -> receipts.Status:
        return self._atomic(lambda: receipts.recall(self, session_id, message_id))

    def expire_mail(self, session_id: str) -> list[str]:
        now = self._now()
        return self._atomic(lambda: (self._session(session_id), self._expire(session_id, now))[1])

    def _expire(self, session_id: str, now: float | None) -> list[str]:
        return receipts.expire_due(self, session_id, now)

    def _now(self) -> float | None:
        return receipts.now_of(self)

    # -- restart -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self.shut = True

    def restart(self) -> int:
        """Everything in the world is durable; only the shutdown flag dies with the process."""
        self.shut = False
        return self.recover()

    def recover(self) -> int:
        """Runs still running died with the process: interrupt them (an open request is
        aborted, so its mail is released); then reconcile every session."""

        now = self._now()

        def work() -> int:
            dead = 0
            for session in list(self.world.sessions.values()):
                run = self.world.runs[session.run_id] if session.run_id is not None else None
                if run is not None and run.status == RunState.RUNNING:
                    self._end(session, run, RunTrigger.INTERRUPT)
                    dead += 1
                self._expire(session.session_id, now)
                self._reconcile(session.session_id)
            return dead

        return self._atomic(work)

    # -- small helpers -------------------------------------------------------------------------

    def _session(self, session_id: str) -> SessionRecord:
        session = self.world.sessions.get(session_id)
        if session is None:
            raise errors.UnknownTarget(f"no session {session_id}")
        return session

    def _live_run(self, session_id: str, run_id: str) -> tuple[SessionRecord, RunRecord]:
        session = self._session(session_id)
        run = self.world.runs.get(run_id)
        if run is None or session.run_id != run_id or run.status != RunState.RUNNING:
            raise errors.UnknownTarget(f"{run_id} is not the running run of {session_id}")
        return session, run

    def _step_message(self, message: MessageRecord, trigger: MessageTrigger) -> None:
        subject = f"message {message.message_id}"
        message.state = step(MESSAGE_STEPS, subject, message.state, trigger)

    def _step_session(
        self, session: SessionRecord, trigger: SessionTrigger, run: RunRecord
    ) -> None:
        session.state = step(SESSION_STEPS, f"session {session.session_id}", session.state,
                             trigger)
        with_run = (SessionState.QUEUED, SessionState.RUNNING)
        session.run_id = run.run_id if session.state in with_run else None


# The session states in which a session has no run: mail must wake it.
_NO_RUN = (SessionState.IDLE, SessionState.FINISHED)
