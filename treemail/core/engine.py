"""The sans-I/O engine: every treemail operation, as one store transaction each.

Theory of operation. Everything a session receives is producer mail: a delegation task, a
user turn, a plugin injection, or agent mail from ``send_message``. Mail is *accepted* (the
durable decision), then *admitted* by the recipient, bound either to its running run (steer)
or to its next run (queue). A session with deliverable mail and no run is woken: a run is
queued (``reconcile``). The caller starts runs, and at each safe boundary between model
requests calls ``begin_request``, which claims the run's mail into the request; committing the
request consumes that mail, aborting it releases the mail for the next boundary.

At open, ``recover`` treats every run still marked running as dead: its open request is
aborted (claimed mail released), the run is interrupted, and every session with pending mail
is made deliverable again. Nothing accepted is lost; nothing consumed is delivered again.

The engine owns no I/O: storage comes in as a ``Store``, ids as an ``IdSource`` and time
(read only while message expiry is on, see ``expiry``) as a ``Clock``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

import attrs

from treemail.core import approvals, events, external, receipts, runs
from treemail.core.clock import Clock, ManualClock
from treemail.core.config import MessagingConfig
from treemail.core.errors import EngineShutdown, InvalidRequest, UnknownTarget
from treemail.core.expiry import expire_due
from treemail.core.ids import IdSource, make_handle
from treemail.core.keys import SESSIONS_COUNTER, delegation_counter
from treemail.core.lifecycle import MessageTrigger, RunTrigger, SessionState
from treemail.core.permissions import Rules
from treemail.core.producers import Produced, check_key, check_mail, produce
from treemail.core.records import (
    AgentSpec,
    Approval,
    ApprovalState,
    Event,
    Message,
    Mode,
    Owner,
    Run,
    SendResult,
    Session,
    ToolContext,
)
from treemail.core.runs import Delivery, Request, need_run, need_session
from treemail.core.sending import AgentCatalogue, current_rules, grant_counter, send
from treemail.core.store import ReadTxn, Store, WriteTxn
from treemail.core.transitions import accept, step_message

__all__ = ["Delivery", "Engine", "Produced", "Request"]

T = TypeVar("T")

# Enum members read once, here: under Python 3.11 a member read through its class goes
# through ``EnumType.__getattr__``'s hook, about ten times the cost of reading a global
# (see ``runs``).
_USER = Owner.USER
_DELEGATION = Owner.DELEGATION
_AGENT = Owner.AGENT
_QUEUE = Mode.QUEUE
_FINISH = RunTrigger.FINISH
_INTERRUPT = RunTrigger.INTERRUPT
_DISCARD = MessageTrigger.DISCARD


class Engine:
    def __init__(
        self, store: Store, ids: IdSource, config: MessagingConfig | None = None,
        agents: AgentCatalogue | None = None, clock: Clock | None = None,
    ) -> None:
        """``agents`` is the agent catalogue (current spec by agent name): permissions are
        read through it at each visibility check and send, so an edited doc reaches live
        sessions. Without one, the rules stored with each session at creation apply.
        ``clock`` is read only while ``message_ttl_seconds`` is on; without one, time stands
        still (nothing expires)."""
        self.store = store
        self.ids = ids
        self.config = config if config is not None else MessagingConfig()
        self.agents = agents
        self.clock: Clock = clock if clock is not None else ManualClock()
        self._shut = False

    @property
    def ttl(self) -> int:
        return self.config.message_ttl_seconds

    @property
    def instant(self) -> float | None:
        """The instant expiry reads, once per operation; None while expiry is off, so no
        clock is read and no mail is stamped."""
        # ``ttl`` read directly: every operation asks this.
        return self.clock.now() if self.config.message_ttl_seconds > 0 else None

    # -- sessions ------------------------------------------------------------------------

    def create_root(self, agent: AgentSpec, *, legacy: bool = False,
                    task: str | None = None) -> Session:
        """A new tree. ``legacy`` stores it without a handle, as sessions made before handles.
        ``task``, when given, is the root's first user input, accepted (and the root woken)
        in the same transaction: a refused task leaves no session behind."""
        if task is None:
            return self._transact(lambda tx: self._create(tx, agent, None, legacy))
        check_mail(task, _USER, "task")

        def work(tx: WriteTxn) -> Session:
            root = self._create(tx, agent, None, legacy)
            produce(tx, self.ids, root.session_id, task, _USER, None, _QUEUE, None)
            runs.reconcile(tx, self.ids, root.session_id)
            return root

        return self._transact(work)

    def delegate(
        self, parent_id: str, agent: AgentSpec, task: str, *, description: str = "",
        legacy: bool = False,
    ) -> Session:
        """A child of ``parent_id`` in the same tree; its task arrives as delegation mail.
        ``description`` says what this child does, shown to its tree peers."""

        check_mail(task, _DELEGATION, "delegated task")

        def work(tx: WriteTxn) -> Session:
            parent = need_session(tx, parent_id)
            child = self._create(tx, agent, parent, legacy, description)
            accept(tx, self.ids, child.session_id, task, _DELEGATION, parent.session_id)
            runs.reconcile(tx, self.ids, child.session_id)
            return child

        return self._transact(work)

    def attach(self, parent_id: str, agent: AgentSpec, secret: str,
               description: str = "") -> tuple[Session, str]:
        """An external session: a child of ``parent_id`` that no actor hosts (an MCP client
        drives it, see ``external``), and the token that binds a client to it. ``secret`` is
        the token's random part, made by the caller."""

        def work(tx: WriteTxn) -> tuple[Session, str]:
            child = self._create(tx, agent, need_session(tx, parent_id), False, description)
            external.mark(tx, child)
            return child, external.issue(tx, child.session_id, secret)

        return self._transact(work)

    def _create(
        self, tx: WriteTxn, agent: AgentSpec, parent: Session | None, legacy: bool,
        description: str = "",
    ) -> Session:
        session_id = self.ids.new_id()
        handle = None if legacy else make_handle(agent.name, session_id)
        root = parent.root_session_id if parent is not None else session_id
        if handle is not None and tx.handle_owner(root, handle) is not None:
            raise InvalidRequest(f"handle {handle} is already taken in tree {root}; "
                                 "the id source minted a colliding id")
        session = Session(
            session_id=session_id,
            root_session_id=root,
            parent_session_id=parent.session_id if parent is not None else None,
            agent=agent,
            handle=handle,
            ordinal=tx.add(SESSIONS_COUNTER, 1),
            description=description,
        )
        tx.put_session(session)
        events.record(tx, session_id, events.SessionCreated(
            root, session.parent_session_id, handle, agent.name, description))
        return session

    # -- mail from outside the agents ------------------------------------------------------

    def accept(
        self, recipient: str, body: str, owner: Owner, *, sender: str | None = None,
        mode: Mode = Mode.QUEUE, key: str | None = None,
    ) -> str:
        """Inject non-agent mail (user, plugin, delegation, goal); it wakes the recipient.
        Returns its message id (see ``produce``)."""
        return self.produce(recipient, body, owner, sender=sender, mode=mode,
                            key=key).result.message_id

    def produce(
        self, recipient: str, body: str, owner: Owner, *, sender: str | None = None,
        mode: Mode = Mode.QUEUE, key: str | None = None,
    ) -> Produced:
        """Inject non-agent mail; it wakes the recipient. Such mail never counts against the
        agent inbox cap. ``mode`` steer is the user's steering: it joins the recipient's
        in-flight run at its next safe boundary (no message permission applies: the user is
        not an agent of the tree), else the next run. With ``key`` (an idempotency key, see
        ``producers``), a retry of the same mail is answered with the first accept."""
        if owner is _AGENT:
            raise InvalidRequest(
                "agent mail enters only through send_message, which runs the guards")
        check_mail(body, owner)
        if key is not None:
            check_key(key)

        def work(tx: WriteTxn) -> Produced:
            # The wake is part of the accept's transaction: one operation, one transaction.
            produced = produce(tx, self.ids, recipient, body, owner, sender, mode, key)
            if not produced.replayed:  # produce found the session by this very id
                runs.reconcile(tx, self.ids, recipient)
            return produced

        return self._transact(work)

    # -- send_message ------------------------------------------------------------------------

    def send_message(self, ctx: ToolContext, arguments: object) -> SendResult:
        """The send_message tool: durably accepted on return, or a typed refusal."""
        if self._shut:
            raise EngineShutdown("the engine is shutting down; nothing was sent")
        now = self.instant

        def work(tx: WriteTxn) -> SendResult:
            sent = send(tx, self.config, self.ids, ctx, arguments, agents=self.agents, now=now)
            # A running or queued recipient takes its mail in itself, at its run's start or
            # next boundary; only a session without a run needs the reconcile that wakes it.
            # It runs in the send's transaction: a send answered with an error must have
            # stored nothing, and a crash must not leave the mail accepted but unwoken.
            if sent.wake:
                runs.reconcile(tx, self.ids, sent.recipient)
            return sent.result

        return self.store.transact(work)  # ``_transact`` written out: every send's

    def grant(self, scope: str, subject: str, label: str) -> None:
        """Record the user's approval of send_message to ``label`` peers.

        ``scope`` is ``once`` (subject ``session/run/tool_call`` of the waiting call),
        ``session`` (subject: sender session id) or ``tree`` (subject: root session id)."""
        name = grant_counter(approvals.scope_named(scope, "grant"), subject, label)
        self._transact(lambda tx: None if tx.count(name) else tx.add(name, 1))

    def hold_for_approval(
        self, ctx: ToolContext, tool: str, arguments: Mapping[str, object], label: str
    ) -> Approval:
        """Durably hold a tool call that an ``ask`` rule stopped, until the user answers."""
        return self._transact(lambda tx: approvals.hold(tx, ctx, tool, arguments, label))

    def answer_approval(self, approval_id: str, approve: bool, scope: str = "once",
                        reason: str | None = None) -> Approval:
        """The user's answer. Approving grants ``scope`` and runs the held call at once; a
        deny's ``reason`` is told to the agent."""
        now = self.instant

        def work(tx: WriteTxn) -> Approval:
            answered, wake = approvals.answer(tx, self.config, self.ids, approval_id, approve,
                                              scope, self.agents, reason, now)
            if wake is not None:
                runs.reconcile(tx, self.ids, wake)
            return answered

        return self._transact(work)

    def approvals(self, *, pending: bool = True) -> list[Approval]:
        with self.store.read() as tx:
            return [a for a in tx.approvals() if a.state is ApprovalState.PENDING or not pending]

    def revert(self, session_id: str) -> list[str]:
        """Revert the branch that created ``session_id``: it and its descendants become ghosts,
        reachable by UUID by whoever holds one, never again by handle."""

        def work(tx: WriteTxn) -> list[str]:
            target = need_session(tx, session_id)
            branch = {target.session_id}
            ghosts: list[str] = []
            for session in list(tx.tree(target.root_session_id)):  # parents precede children
                if session.session_id in branch or session.parent_session_id in branch:
                    branch.add(session.session_id)
                    if session.live:
                        tx.put_session(attrs.evolve(session, live=False))
                        events.record(tx, session.session_id, events.SessionReverted(session_id))
                        ghosts.append(session.session_id)
            return ghosts

        return self._transact(work)

    def fork(self, session_id: str) -> Session:
        """Fork a session's history: a new session of the same agent, beside the source (same
        parent and tree; a forked root starts a tree of its own), whose conversation begins
        with the source's as it is now (``SessionForked`` records where). Mail stays where it
        was delivered: the fork inherits no pending mail and no delegation."""

        def work(tx: WriteTxn) -> Session:
            source = need_session(tx, session_id)
            parent = (need_session(tx, source.parent_session_id)
                      if source.parent_session_id is not None else None)
            fork = self._create(tx, source.agent, parent, source.handle is None)
            upto = max(e.seq for e in tx.events(session_id))  # SessionCreated at least
            events.record(tx, fork.session_id, events.SessionForked(session_id, upto))
            return fork

        return self._transact(work)

    def stranded_delegations(self, trees: Collection[str] | None = None) -> list[Session]:
        """Delegated sessions a crash left with nothing to wake them: their delegation is not
        complete, they have no run and no pending mail, and their last run died at restart
        (the task was already consumed, so no mail is left to start a new run). A runtime
        resumes them; a run cancelled on purpose is not stranded."""
        with self.store.read() as tx:
            return [s for s in tx.sessions() if _stranded(tx, s)
                    and (trees is None or s.root_session_id in trees)]

    def feed_end(self) -> int:
        """The number of the feed's last event: where a live observer starts following."""
        with self.store.read() as tx:
            return tx.feed_end()

    def feed(self, after: int = 0) -> list[tuple[int, Event]]:
        """Every session's events in global order after ``after``: the live or replayed log."""
        with self.store.read() as tx:
            return list(tx.feed(after))

    def tool_visible(self, session_id: str) -> bool:
        """Whether send_message is shown to this session's model at all."""
        with self.store.read() as tx:
            return self.rules_of(need_session(tx, session_id)).visible

    def rules_of(self, session: Session) -> Rules:
        """The message rules governing ``session`` now (see ``current_rules``)."""
        return current_rules(self.agents, session)

    # -- runs and requests -------------------------------------------------------------------

    def reconcile(self, session_id: str) -> None:
        """Expire stale mail, admit accepted mail, and give a session with deliverable mail
        and no run a run."""
        now = self.instant
        self._transact(lambda tx: runs.reconcile(tx, self.ids, session_id, now, self.ttl))

    def start_run(self, session_id: str) -> Run:
        """Start the session's queued run; mail waiting for the next run is bound to it."""
        # ``_transact`` written out in the engine's own steps (start, begin, commit, finish):
        # the model checker's drains take millions of them.
        return self.store.transact(lambda tx: runs.start(tx, session_id))

    def begin_request(self, session_id: str, run_id: str) -> Request:
        """A safe boundary: claim the run's deliverable mail into a new model request."""
        now = self.instant
        return self.store.transact(lambda tx: runs.begin(tx, self.ids, session_id, run_id,
                                                         self.agents, now, self.ttl))

    def commit_request(
        self, session_id: str, run_id: str, request_id: str,
        output: events.Reply | None = None,
    ) -> None:
        """The request committed: its mail is consumed, exactly once.

        ``output`` (the model's reply and the mail texts it read) is appended to the session's
        log as ``ModelOutput`` in the same transaction, so the durable transcript holds the
        reply exactly when it holds the mail that prompted it."""

        def work(tx: WriteTxn) -> None:
            runs.close(tx, session_id, run_id, request_id, committed=True)
            if output is not None:
                events.record(tx, session_id, events.ModelOutput(
                    run_id, request_id, output.inputs, output.text, output.tool_calls))

        self.store.transact(work)

    def abort_request(self, session_id: str, run_id: str, request_id: str) -> None:
        """The request did not commit: its mail is released for the next boundary."""
        now = self.instant
        self._transact(
            lambda tx: runs.close(tx, session_id, run_id, request_id, committed=False, now=now))

    def record_tool_results(
        self, session_id: str, run_id: str, results: Sequence[events.RecordedResult]
    ) -> None:
        """Append the results of the tool calls of the run's last reply (``ToolResults``), so
        the durable transcript can be rebuilt after eviction or restart."""

        def work(tx: WriteTxn) -> None:
            runs.live_run(tx, session_id, run_id)
            events.record(tx, session_id, events.ToolResults(run_id, tuple(results)))

        self._transact(work)

    def finish_run(self, session_id: str, run_id: str, result: str | None = None) -> bool:
        """The run completed; mail that missed it is bound to the next run, which is queued.

        With ``result``, the first finished run of a delegated session also completes its
        delegation: the result reaches the parent as delegation mail in the same transaction.
        Returns whether it did (a woken session's later runs never report again)."""

        def work(tx: WriteTxn) -> bool:
            session = runs.end(tx, self.ids, session_id, run_id, _FINISH,
                               "completed")
            return result is not None and runs.complete_delegation(tx, self.ids, session, result)

        return self.store.transact(work)

    def cancel_run(self, session_id: str, run_id: str, reason: str = "cancelled",
                   fault: events.Fault | None = None) -> None:
        """Interrupt a queued or running run; an open request is aborted first. ``fault``
        records what a failed model call knew beside the reason."""
        now = self.instant
        self._transact(lambda tx: runs.end(tx, self.ids, session_id, run_id,
                                           _INTERRUPT, reason, fault, now=now))

    def give_up_run(self, session_id: str, run_id: str, reason: str,
                    fault: events.Fault | None = None) -> bool:
        """Interrupt the run and leave the session idle, its mail kept until new input wakes
        it; a delegated session's parent is told why. Returns whether a parent was told."""

        now = self.instant

        def work(tx: WriteTxn) -> bool:
            session = runs.end(tx, self.ids, session_id, run_id, _INTERRUPT, reason,
                               fault, wake=False, now=now)
            return runs.report_interruption(tx, self.ids, session, reason)

        return self._transact(work)

    def discard(self, message_id: str, reason: str) -> None:
        """Drop a pending, unclaimed message by an explicit decision, with its reason."""
        if not reason.strip():
            raise InvalidRequest("a discard needs a reason, recorded in the event log")

        def work(tx: WriteTxn) -> None:
            message = tx.message(message_id)
            if message is None:
                raise UnknownTarget(f"no message {message_id}")
            step_message(tx, message, _DISCARD, reason=reason, run_id=None)

        self._transact(work)

    # -- receipts, recall and expiry (``receipts``, ``expiry``) ------------------------------

    def message_status(self, session_id: str, message_id: str) -> receipts.Receipt:
        """The receipt of agent mail ``session_id`` sent: only its sender may ask."""
        with self.store.read() as tx:
            return receipts.status(tx, session_id, message_id)

    def cancel_message(self, session_id: str, message_id: str) -> receipts.Receipt:
        """The sender recalls its own mail before a request claimed it; ``too_late`` after."""
        return self._transact(lambda tx: receipts.cancel(tx, session_id, message_id))

    def expire_mail(self, session_id: str) -> list[str]:
        """Discard the session's agent mail that waited unclaimed past the TTL, at the
        clock's now; the ids expired. Nothing while expiry is off."""
        now = self.instant

        def work(tx: WriteTxn) -> list[str]:
            need_session(tx, session_id)
            return expire_due(tx, session_id, now, self.ttl)

        return self._transact(work)

    def recover(self, trees: Collection[str] | None = None) -> int:
        """At open: interrupt runs that died with the process, then make all mail deliverable;
        only in ``trees`` (roots) when given: those taken over from a dead daemon.

        Returns how many runs were found dead."""
        now = self.instant
        return self._transact(lambda tx: runs.recover(tx, self.ids, trees, now, self.ttl))

    def shutdown(self) -> None:
        """Refuse new sends from now on; what was accepted stays durable."""
        self._shut = True

    # -- reading -------------------------------------------------------------------------------

    def session(self, session_id: str) -> Session:
        with self.store.read() as tx:
            return need_session(tx, session_id)

    def run(self, run_id: str) -> Run:
        with self.store.read() as tx:
            return need_run(tx, run_id)

    def message(self, message_id: str) -> Message:
        with self.store.read() as tx:
            found = tx.message(message_id)
        if found is None:
            raise UnknownTarget(f"no message {message_id}")
        return found

    def pending(self, session_id: str) -> list[Message]:
        with self.store.read() as tx:
            return list(tx.pending(session_id))

    def sessions(self) -> list[Session]:
        with self.store.read() as tx:
            return list(tx.sessions())

    def events(self, session_id: str, after: int = 0) -> list[Event]:
        with self.store.read() as tx:
            return list(tx.events(session_id, after))

    def _transact(self, work: Callable[[WriteTxn], T]) -> T:
        return self.store.transact(work)


def _stranded(tx: ReadTxn, session: Session) -> bool:
    if session.parent_session_id is None or session.state is not SessionState.IDLE:
        return False
    if external.is_external(tx, session.session_id):
        return False  # its client, not a resumed run, picks its work up again
    # An idle session holds no deliverable mail (reconcile would have queued a run), so the
    # log alone tells whether the last run died at restart.
    if tx.count(delegation_counter(session.session_id)):
        return False
    # Idle after having run means the last run was interrupted (a finish leaves it finished):
    # stranded exactly when that interruption was recovery's.
    interrupts = [p for _, p in events.typed(tx.events(session.session_id))
                  if isinstance(p, events.RunInterrupted)]
    return bool(interrupts) and interrupts[-1].reason == runs.CRASH
