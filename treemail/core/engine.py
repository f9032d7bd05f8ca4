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

The engine owns no I/O: storage comes in as a ``Store`` and ids as an ``IdSource``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import attrs

from treemail.core import approvals
from treemail.core.config import MessagingConfig
from treemail.core.delivery import (
    accept,
    admit_accepted,
    bound_to,
    step_message,
    step_session,
)
from treemail.core.envelope import render_envelope
from treemail.core.errors import (
    EngineShutdown,
    IllegalTransition,
    InvalidRequest,
    UnknownTarget,
)
from treemail.core.ids import IdSource, make_handle
from treemail.core.records import (
    AgentSpec,
    Approval,
    ApprovalState,
    Event,
    Message,
    Mode,
    Owner,
    Run,
    RunStatus,
    SendResult,
    Session,
    ToolContext,
)
from treemail.core.sending import grant_counter, send
from treemail.core.store import ReadTxn, Store, WriteTxn

__all__ = ["Delivery", "Engine", "Request"]

T = TypeVar("T")


@attrs.frozen
class Delivery:
    """One message as it enters a model request: ``text`` is exactly what the model sees."""

    message_id: str
    owner: Owner
    text: str


@attrs.frozen
class Request:
    """A model request opened at a safe boundary, with the mail it claimed."""

    request_id: str
    run_id: str
    deliveries: tuple[Delivery, ...]


class Engine:
    def __init__(
        self, store: Store, ids: IdSource, config: MessagingConfig | None = None
    ) -> None:
        self.store = store
        self.ids = ids
        self.config = config if config is not None else MessagingConfig()
        self._shut = False

    # -- sessions ------------------------------------------------------------------------

    def create_root(self, agent: AgentSpec, *, legacy: bool = False) -> Session:
        """A new tree. ``legacy`` stores it without a handle, as sessions made before handles."""
        return self._transact(lambda tx: self._create(tx, agent, None, legacy))

    def delegate(
        self, parent_id: str, agent: AgentSpec, task: str, *, legacy: bool = False
    ) -> Session:
        """A child of ``parent_id`` in the same tree; its task arrives as delegation mail."""

        def work(tx: WriteTxn) -> Session:
            parent = _need_session(tx, parent_id)
            child = self._create(tx, agent, parent, legacy)
            self._produce(tx, child, task, Owner.DELEGATION, parent.session_id)
            return child

        child = self._transact(work)
        self.reconcile(child.session_id)
        return child

    def _create(
        self, tx: WriteTxn, agent: AgentSpec, parent: Session | None, legacy: bool
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
            ordinal=tx.add("sessions", 1),
        )
        tx.put_session(session)
        tx.append(session_id, "SessionCreated", {
            "root_session_id": root,
            "parent_session_id": session.parent_session_id,
            "handle": handle,
            "agent": agent.name,
        })
        return session

    # -- mail from outside the agents ------------------------------------------------------

    def produce(
        self, recipient: str, body: str, owner: Owner, *, sender: str | None = None
    ) -> str:
        """Inject non-agent mail (user, plugin, delegation, goal); it wakes the recipient.

        Such mail never counts against the agent inbox cap."""
        if owner is Owner.AGENT:
            raise InvalidRequest("agent mail is sent with send_message, not produce")
        if not body.strip():
            raise InvalidRequest("mail body is empty; produce needs text for the recipient")

        def work(tx: WriteTxn) -> str:
            return self._produce(tx, _need_session(tx, recipient), body, owner, sender)

        message_id = self._transact(work)
        self.reconcile(recipient)
        return message_id

    def _produce(
        self, tx: WriteTxn, recipient: Session, body: str, owner: Owner, sender: str | None
    ) -> str:
        message = Message(
            message_id=self.ids.new_id(),
            recipient=recipient.session_id,
            sender=sender,
            owner=owner,
            body=body,
            mode=Mode.QUEUE,
            hop=0,
            seq=tx.add(f"seq/{recipient.session_id}", 1),
        )
        return accept(tx, message).message_id

    # -- send_message ------------------------------------------------------------------------

    def send_message(self, ctx: ToolContext, arguments: object) -> SendResult:
        """The send_message tool: durably accepted on return, or a typed refusal."""
        if self._shut:
            raise EngineShutdown("the engine is shutting down; nothing was sent")
        sent = self._transact(lambda tx: send(tx, self.config, self.ids, ctx, arguments))
        if not sent.replayed:
            self.reconcile(sent.recipient)
        return sent.result

    def grant(self, scope: str, subject: str, label: str) -> None:
        """Record the user's approval of send_message to ``label`` peers.

        ``scope`` is ``once`` (subject ``session/run/tool_call`` of the waiting call),
        ``session`` (subject: sender session id) or ``tree`` (subject: root session id)."""
        if scope not in ("once", "session", "tree"):
            raise InvalidRequest(f"grant scope must be once, session or tree, not {scope!r}")
        name = grant_counter(scope, subject, label)
        self._transact(lambda tx: None if tx.count(name) else tx.add(name, 1))

    def hold_for_approval(
        self, ctx: ToolContext, tool: str, arguments: Mapping[str, object], label: str
    ) -> Approval:
        """Durably hold a tool call that an ``ask`` rule stopped, until the user answers."""
        return self._transact(lambda tx: approvals.hold(tx, ctx, tool, arguments, label))

    def answer_approval(self, approval_id: str, approve: bool, scope: str = "once") -> Approval:
        """The user's answer. Approving grants ``scope`` and runs the held call at once."""
        answered, wake = self._transact(
            lambda tx: approvals.answer(tx, self.config, self.ids, approval_id, approve, scope))
        if wake is not None:
            self.reconcile(wake)
        return answered

    def approvals(self, *, pending: bool = True) -> list[Approval]:
        with self.store.read() as tx:
            return [a for a in tx.approvals() if a.state is ApprovalState.PENDING or not pending]

    def revert(self, session_id: str) -> list[str]:
        """Revert the branch that created ``session_id``: it and its descendants become ghosts,
        reachable by UUID by whoever holds one, never again by handle."""

        def work(tx: WriteTxn) -> list[str]:
            target = _need_session(tx, session_id)
            branch = {target.session_id}
            ghosts: list[str] = []
            for session in list(tx.tree(target.root_session_id)):  # parents precede children
                if session.session_id in branch or session.parent_session_id in branch:
                    branch.add(session.session_id)
                    if session.live:
                        tx.put_session(attrs.evolve(session, live=False))
                        tx.append(session.session_id, "SessionReverted", {"branch": session_id})
                        ghosts.append(session.session_id)
            return ghosts

        return self._transact(work)

    def feed(self, after: int = 0) -> list[tuple[int, Event]]:
        """Every session's events in global order after ``after``: the live or replayed log."""
        with self.store.read() as tx:
            return list(tx.feed(after))

    def tool_visible(self, session_id: str) -> bool:
        """Whether send_message is shown to this session's model at all."""
        with self.store.read() as tx:
            return _need_session(tx, session_id).agent.rules.visible

    # -- runs and requests -------------------------------------------------------------------

    def reconcile(self, session_id: str) -> None:
        """Admit accepted mail, and give a session with deliverable mail and no run a run."""
        self._transact(lambda tx: self._reconcile(tx, session_id))

    def _reconcile(self, tx: WriteTxn, session_id: str) -> None:
        session = _need_session(tx, session_id)
        current = tx.run(session.run_id) if session.run_id is not None else None
        admit_accepted(tx, session, current)
        if session.state in ("idle", "finished") and next(bound_to(tx, session_id, None), None):
            number = tx.add(f"runs/{session_id}", 1)
            run = Run(self.ids.new_id(), session_id, number)
            tx.put_run(run)
            step_session(tx, session, "enqueue", run, reason="wake")

    def start_run(self, session_id: str) -> Run:
        """Start the session's queued run; mail waiting for the next run is bound to it."""

        def work(tx: WriteTxn) -> Run:
            session = _need_session(tx, session_id)
            if session.state != "queued" or session.run_id is None:
                raise IllegalTransition(f"session {session_id}", "start", session.state, ())
            run = attrs.evolve(_need_run(tx, session.run_id), status=RunStatus.RUNNING)
            tx.put_run(run)
            step_session(tx, session, "start", run)
            for message in list(bound_to(tx, session_id, None)):
                tx.put_message(attrs.evolve(message, run_id=run.run_id))
            return run

        return self._transact(work)

    def begin_request(self, session_id: str, run_id: str) -> Request:
        """A safe boundary: claim the run's deliverable mail into a new model request."""
        return self._transact(lambda tx: self._begin(tx, session_id, run_id))

    def _begin(self, tx: WriteTxn, session_id: str, run_id: str) -> Request:
        session, run = _live_run(tx, session_id, run_id)
        if run.open_request is not None:
            raise IllegalTransition(f"run {run_id}", "begin_request", "request open",
                                    ("commit_request", "abort_request"))
        admit_accepted(tx, session, run)
        request_id = self.ids.new_id()
        claimed = [
            step_message(tx, m, "claim", request_id=request_id)
            for m in list(bound_to(tx, session_id, run_id))
        ]
        tx.put_run(attrs.evolve(run, open_request=request_id))
        tx.append(session_id, "RequestBegun", {
            "run_id": run_id, "request_id": request_id,
            "message_ids": [m.message_id for m in claimed],
        })
        deliveries = tuple(self._delivery(tx, session, m) for m in claimed)
        return Request(request_id, run_id, deliveries)

    def _delivery(self, tx: ReadTxn, recipient: Session, message: Message) -> Delivery:
        text = message.body
        if message.owner is Owner.AGENT and message.sender is not None:
            sender = _need_session(tx, message.sender)
            text = render_envelope(sender.reference, message.body,
                                   reply_hint=recipient.agent.rules.visible)
        return Delivery(message.message_id, message.owner, text)

    def commit_request(
        self, session_id: str, run_id: str, request_id: str,
        output: Mapping[str, object] | None = None,
    ) -> None:
        """The request committed: its mail is consumed, exactly once.

        ``output`` (the model's reply, as JSON-compatible data) is appended to the session's
        log as ``ModelOutput`` in the same transaction, so the durable transcript holds the
        reply exactly when it holds the mail that prompted it."""

        def work(tx: WriteTxn) -> None:
            self._close_request(tx, session_id, run_id, request_id, True)
            if output is not None:
                tx.append(session_id, "ModelOutput",
                          {"run_id": run_id, "request_id": request_id, **output})

        self._transact(work)

    def record_tool_results(
        self, session_id: str, run_id: str, results: Sequence[Mapping[str, object]]
    ) -> None:
        """Append the results of the tool calls of the run's last reply (``ToolResults``), so
        the durable transcript can be rebuilt after eviction or restart."""

        def work(tx: WriteTxn) -> None:
            _live_run(tx, session_id, run_id)
            tx.append(session_id, "ToolResults", {"run_id": run_id, "results": list(results)})

        self._transact(work)

    def abort_request(self, session_id: str, run_id: str, request_id: str) -> None:
        """The request did not commit: its mail is released for the next boundary."""
        self._transact(lambda tx: self._close_request(tx, session_id, run_id, request_id, False))

    def _close_request(
        self, tx: WriteTxn, session_id: str, run_id: str, request_id: str, committed: bool
    ) -> None:
        _, run = _live_run(tx, session_id, run_id)
        if run.open_request != request_id:
            raise UnknownTarget(f"request {request_id} is not the open request of run {run_id}")
        _settle_request(tx, run, committed)

    def finish_run(self, session_id: str, run_id: str) -> None:
        """The run completed. Mail that missed it is bound to the next run, which is queued."""
        self._end_run(session_id, run_id, "finish", RunStatus.FINISHED, "completed")

    def cancel_run(self, session_id: str, run_id: str, reason: str = "cancelled") -> None:
        """Interrupt a queued or running run; an open request is aborted first."""
        self._end_run(session_id, run_id, "interrupt", RunStatus.INTERRUPTED, reason)

    def _end_run(
        self, session_id: str, run_id: str, event: str, status: RunStatus, reason: str
    ) -> None:
        def work(tx: WriteTxn) -> None:
            session = _need_session(tx, session_id)
            if session.run_id != run_id:
                raise UnknownTarget(f"run {run_id} is not the current run of {session_id}")
            _end(tx, session, _need_run(tx, run_id), event, status, reason)
            self._reconcile(tx, session_id)

        self._transact(work)

    def discard(self, message_id: str, reason: str) -> None:
        """Drop a pending, unclaimed message by an explicit decision, with its reason."""
        if not reason.strip():
            raise InvalidRequest("a discard needs a reason, recorded in the event log")

        def work(tx: WriteTxn) -> None:
            message = tx.message(message_id)
            if message is None:
                raise UnknownTarget(f"no message {message_id}")
            step_message(tx, message, "discard", reason=reason, run_id=None)

        self._transact(work)

    def recover(self) -> int:
        """At open: interrupt runs that died with the process, then make all mail deliverable.

        Returns how many runs were found dead."""

        def work(tx: WriteTxn) -> int:
            dead = 0
            for session in list(tx.sessions()):
                run = tx.run(session.run_id) if session.run_id is not None else None
                if run is not None and run.status is RunStatus.RUNNING:
                    _end(tx, session, run, "interrupt", RunStatus.INTERRUPTED,
                         "crash found at restart")
                    dead += 1
                self._reconcile(tx, session.session_id)
            return dead

        return self._transact(work)

    def shutdown(self) -> None:
        """Refuse new sends from now on; what was accepted stays durable."""
        self._shut = True

    # -- reading -------------------------------------------------------------------------------

    def session(self, session_id: str) -> Session:
        with self.store.read() as tx:
            return _need_session(tx, session_id)

    def run(self, run_id: str) -> Run:
        with self.store.read() as tx:
            return _need_run(tx, run_id)

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


def _settle_request(tx: WriteTxn, run: Run, committed: bool) -> Run:
    base_hop = run.base_hop
    for message in list(tx.pending(run.session_id)):
        if message.state != "claimed" or message.request_id != run.open_request:
            continue
        if committed:
            step_message(tx, message, "consume")
            if message.owner is Owner.AGENT:
                base_hop = max(base_hop, message.hop)
        else:
            step_message(tx, message, "release", request_id=None)
    settled = attrs.evolve(run, open_request=None, base_hop=base_hop)
    tx.put_run(settled)
    tx.append(run.session_id, "RequestCommitted" if committed else "RequestAborted",
              {"run_id": run.run_id, "request_id": run.open_request})
    return settled


def _end(
    tx: WriteTxn, session: Session, run: Run, event: str, status: RunStatus, reason: str
) -> None:
    if run.open_request is not None:
        if event == "finish":
            raise IllegalTransition(f"run {run.run_id}", "finish", "request open",
                                    ("commit_request", "abort_request"))
        run = _settle_request(tx, run, committed=False)
    step_session(tx, session, event, run, reason=reason)
    tx.put_run(attrs.evolve(run, status=status))
    # Mail bound to this run but never claimed in it waits for the next run.
    for message in list(bound_to(tx, session.session_id, run.run_id)):
        tx.put_message(attrs.evolve(message, run_id=None))


def _need_session(tx: ReadTxn, session_id: str) -> Session:
    session = tx.session(session_id)
    if session is None:
        raise UnknownTarget(f"no session {session_id}")
    return session


def _need_run(tx: ReadTxn, run_id: str) -> Run:
    run = tx.run(run_id)
    if run is None:
        raise UnknownTarget(f"no run {run_id}")
    return run


def _live_run(tx: ReadTxn, session_id: str, run_id: str) -> tuple[Session, Run]:
    session = _need_session(tx, session_id)
    run = _need_run(tx, run_id)
    if session.run_id != run_id or run.status is not RunStatus.RUNNING:
        raise UnknownTarget(f"run {run_id} is not the running run of session {session_id}")
    return session, run
