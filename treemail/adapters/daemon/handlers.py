"""The methods of protocol 19, over the runtime: each takes decoded params, returns a result.

Each handler registers itself by its method's constant (``@handles(m.SESSION_GET)``), so its
params and result are that constant's types; ``install`` binds them all to the daemon.

Reads go through the runtime's writer thread too (``writer.quiet``): one thread owns the
store, and a read never blocks the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from treemail import __name__ as _package
from treemail.adapters.daemon import pages
from treemail.adapters.daemon.connection import Connection
from treemail.adapters.daemon.external import External
from treemail.adapters.daemon.receipts import Receipts
from treemail.adapters.daemon.routes import ROUTES
from treemail.adapters.daemon.views import (
    accepted_view,
    approval_view,
    message_view,
    run_view,
    sent_view,
    session_view,
)
from treemail.adapters.runtime.agent_docs import build_agents
from treemail.adapters.runtime.llm import ToolCall
from treemail.core import events
from treemail.core.agents import AgentDoc, parse_agent_doc
from treemail.core.errors import InvalidRequest, InvalidToolContext
from treemail.core.lifecycle import SessionState
from treemail.core.producers import PLUGIN_BODY_MAX_BYTES, Produced, check_mail
from treemail.core.records import (
    Approval,
    Event,
    Message,
    Mode,
    Owner,
    RecipientState,
    Session,
    ToolContext,
)
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.rpc_errors import UnsupportedVersion

if TYPE_CHECKING:
    from treemail.adapters.daemon.server import Daemon
    from treemail.adapters.runtime.runtime import Agent

__all__ = ["ROUTES", "SERVER_NAME", "install"]

SERVER_NAME = "treemail-daemon"
T = TypeVar("T")

# Every handler below registers itself in the daemon's table, by its method's constant.
handles = ROUTES.handles


class Methods:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.rt = daemon.runtime
        self.engine = daemon.runtime.engine

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.rt.writer.quiet(fn, *args)

    @handles(m.AUTH_CHALLENGE)
    async def auth_challenge(self, conn: Connection,
                             p: t.AuthChallengeParams) -> t.AuthChallengeResult:
        raise _proved(conn, m.AUTH_CHALLENGE)

    @handles(m.AUTH_PROVE)
    async def auth_prove(self, conn: Connection, p: t.AuthProveParams) -> t.AuthProveResult:
        raise _proved(conn, m.AUTH_PROVE)

    @handles(m.INITIALIZE)
    async def initialize(self, conn: Connection, p: t.InitializeParams) -> t.InitializeResult:
        if p.protocol_version != m.PROTOCOL_VERSION:
            raise UnsupportedVersion(
                f"protocol version {p.protocol_version} is not supported; this daemon speaks "
                f"protocol_version {m.PROTOCOL_VERSION}", asked=p.protocol_version,
                supported=m.PROTOCOL_VERSION)
        if conn.initialized:
            raise InvalidRequest("this connection is already initialized; initialize once")
        conn.initialized = True
        conn.capabilities = p.capabilities
        if p.capabilities.plugin_events:  # live from now on
            self.daemon.subscriptions.plugin_events(conn, await self.daemon.subscriptions.head())
        limits = self.daemon.limits
        return t.InitializeResult(
            protocol_version=m.PROTOCOL_VERSION,
            server_info=t.ServerInfo(name=SERVER_NAME, version=_version()),
            capabilities=t.ServerCapabilities(
                methods=sorted(self.daemon.handlers), notifications=sorted(m.NOTIFICATIONS),
                max_frame_bytes=limits.max_frame_bytes, max_in_flight=limits.max_in_flight,
                plugin_body_max_bytes=PLUGIN_BODY_MAX_BYTES))

    @handles(m.SHUTDOWN)
    async def shutdown(self, conn: Connection, p: t.Empty) -> t.ShutdownResult:
        self.daemon.request_stop()
        return t.ShutdownResult(shutting_down=True)

    @handles(m.SESSION_CREATE)
    async def session_create(self, conn: Connection,
                             p: t.SessionCreateParams) -> t.SessionView:
        # Every doc is parsed, and every agent built, and the task checked, before any is
        # kept or registered: a bad one changes nothing.
        if p.task is not None:
            check_mail(p.task, Owner.USER, "task")
        sources = [(text, f"session.create agent_docs[{index}]")
                   for index, text in enumerate(p.agent_docs)]
        if p.agent_doc is not None:
            sources.append((p.agent_doc, "session.create agent_doc"))
        texts = [text for text, _ in sources]
        docs = [parse_agent_doc(text, source=source) for text, source in sources]
        built = build_agents({doc.spec.name: doc for doc in docs}, self.daemon.model_for)
        name = p.agent if p.agent is not None else docs[-1].spec.name
        if name not in self.rt.agents and name not in built:
            raise InvalidRequest(f"no agent {name!r}; known agents: "
                                 f"{', '.join(sorted({*self.rt.agents, *built}))}", agent=name)
        if docs and self.daemon.registered is not None:  # kept before used: see registered.py
            await self.daemon.registered.keep(list(zip(docs, texts, strict=True)),
                                              lambda: self._register(docs, built))
        else:
            self._register(docs, built)
        return session_view(await self.rt.create_root(name, p.task))

    def _register(self, docs: list[AgentDoc], built: dict[str, Agent]) -> None:
        """Add (or replace) the agents the docs define, built with the daemon's model."""
        self.rt.register({doc.spec.name: built[doc.spec.name] for doc in docs})

    @handles(m.SESSION_GET)
    async def session_get(self, conn: Connection, p: t.SessionGetParams) -> t.SessionView:
        return msgspec.structs.replace(
            session_view(await self.read(self.engine.session, p.session_id)),
            resident=self.rt.resident(p.session_id))

    @handles(m.SESSION_LIST)
    async def session_list(self, conn: Connection,
                           p: t.SessionListParams) -> t.SessionListResult:
        found, next = await self.read(pages.sessions, self.engine, p.root_session_id, p.after,
                                      p.limit)
        return t.SessionListResult(sessions=[
            msgspec.structs.replace(session_view(s), resident=self.rt.resident(s.session_id))
            for s in found], next=next)

    @handles(m.RUN_SUBMIT)
    async def run_submit(self, conn: Connection, p: t.RunSubmitParams) -> t.ProducerAccepted:
        return await self.accept(p.session_id, p.text, Owner.USER, Mode.QUEUE,
                                 p.idempotency_key)

    async def accept(self, sid: str, text: str, owner: Owner, mode: Mode,
                     key: str | None = None) -> t.ProducerAccepted:
        """Accept mail and wake the session. ``recipient_state`` is the state the mail found
        when it was accepted (a keyed retry's, the first accept's), not a later one."""
        produced: Produced = await self.rt.writer(  # the session first: its tree's lane
            self.engine.produce, sid, text, owner, mode=mode, key=key)
        if not produced.replayed:
            self.rt.poke(sid)
        return await self.accepted(produced.result.message_id,
                                   produced.result.recipient_state)

    @handles(m.RUN_STEER)
    async def run_steer(self, conn: Connection, p: t.RunSteerParams) -> t.ProducerAccepted:
        return await self.accept(p.session_id, p.text, Owner.USER, Mode.STEER,
                                 p.idempotency_key)

    async def accepted(self, message_id: str,
                       state: RecipientState) -> t.ProducerAccepted:
        """The accept as the sender sees it; ``mode`` is the effective one: steer only when
        the mail joined a run in flight."""
        message: Message = await self.read(self.engine.message, message_id)
        joined = message.mode is Mode.STEER and message.run_id is not None
        return accepted_view(message, Mode.STEER if joined else Mode.QUEUE, state)

    @handles(m.SESSION_DELEGATE)
    async def session_delegate(self, conn: Connection,
                               p: t.SessionDelegateParams) -> t.SessionView:
        spec = self.rt.agent(p.agent).spec if p.agent in self.rt.agents else None
        if spec is None:
            raise InvalidRequest(f"no agent {p.agent!r}; known agents: "
                                 f"{', '.join(sorted(self.rt.agents))}", agent=p.agent)
        child: Session = await self.rt.writer(self.engine.delegate, p.parent_session_id,
                                              spec, p.task)
        self.rt.poke(child.session_id)
        return session_view(child)

    @handles(m.RUN_CANCEL)
    async def run_cancel(self, conn: Connection, p: t.RunCancelParams) -> t.RunCancelResult:
        run = await self.rt.cancel(p.session_id)
        return t.RunCancelResult(run=run_view(run),
                                 session=session_view(await self.read(self.engine.session,
                                                                      p.session_id)))

    @handles(m.RUN_GET)
    async def run_get(self, conn: Connection, p: t.RunGetParams) -> t.RunView:
        return run_view(await self.read(self.engine.run, p.run_id))

    @handles(m.RUN_LIST)
    async def run_list(self, conn: Connection, p: t.RunListParams) -> t.RunListResult:
        found, next = await self.read(pages.runs, self.engine, p.session_id, p.after, p.limit)
        return t.RunListResult(runs=[run_view(r) for r in found], next=next)

    @handles(m.MESSAGE_LIST)
    async def message_list(self, conn: Connection,
                           p: t.MessageListParams) -> t.MessageListResult:
        found, next = await self.read(pages.messages, self.engine, p.session_id, p.after,
                                      p.limit, p.pending_only)
        return t.MessageListResult(messages=[message_view(m) for m in found], next=next)

    @handles(m.MESSAGE_GET)
    async def message_get(self, conn: Connection, p: t.MessageGetParams) -> t.MessageReceipt:
        message: Message = await self.read(self.engine.message, p.message_id)
        logged: list[Event] = await self.read(self.engine.events, message.recipient)
        history = [
            t.MessageHistoryEntry(
                seq=event.seq, kind=event.kind, run_id=mail.run_id, request_id=mail.request_id,
                reason=mail.reason if isinstance(mail, events.ProducerMessageDiscarded)
                else None)
            for event, mail in events.typed(logged)
            if isinstance(mail, events.MESSAGE_PAYLOADS) and mail.message_id == p.message_id]
        return t.MessageReceipt(message=message_view(message), history=history)

    @handles(m.TOOL_CALL)
    async def tool_call(self, conn: Connection, p: t.ToolCallParams) -> t.ToolCallResult:
        session: Session = await self.read(self.engine.session, p.session_id)
        if session.state is not SessionState.RUNNING or session.run_id is None:
            raise InvalidToolContext(
                f"session {session.reference} has no run in flight ({session.state}); "
                "tool.call runs a tool as the session's running run", state=session.state)
        call = ToolCall(p.tool_call_id, p.name, p.arguments)
        outcome = await self.rt.tools.execute(session, session.run_id, call)
        for target in outcome.stop:
            await self.rt.interrupted(target)
        for target in outcome.poke:
            self.rt.poke(target)
        if outcome.approval is None:
            return t.ToolCallResult(content=outcome.content,
                                    accepted=await sent_view(p.name, outcome.content,
                                                             self._message))
        ctx = ToolContext(session.session_id, session.run_id, p.tool_call_id)
        held: Approval = await self.rt.writer(
            self.engine.hold_for_approval, ctx, p.name, p.arguments,
            str(outcome.approval.details.get("label")))
        return t.ToolCallResult(content=outcome.content, approval_id=held.approval_id)

    async def _message(self, message_id: str) -> Message:
        message: Message = await self.read(self.engine.message, message_id)
        return message

    @handles(m.APPROVAL_LIST)
    async def approval_list(self, conn: Connection,
                            p: t.ApprovalListParams) -> t.ApprovalListResult:
        approvals: list[Approval] = await self.rt.writer.quiet(
            lambda: self.engine.approvals(pending=p.pending_only))
        return t.ApprovalListResult(approvals=[approval_view(a) for a in approvals])

    @handles(m.APPROVAL_ANSWER)
    async def approval_answer(self, conn: Connection,
                              p: t.ApprovalAnswerParams) -> t.ApprovalView:
        return approval_view(await self.rt.answer(p.approval_id, p.approve, p.scope,
                                                  p.reason))

    @handles(m.EVENTS_SUBSCRIBE)
    async def events_subscribe(self, conn: Connection,
                               p: t.EventsSubscribeParams) -> t.EventsSubscribeResult:
        head = await self.daemon.subscriptions.head()
        sub_id = await self.daemon.subscriptions.subscribe(conn, p.after, p.session_id)
        return t.EventsSubscribeResult(subscription_id=sub_id, head=head)

    @handles(m.EVENTS_READ)
    async def events_read(self, conn: Connection,
                          p: t.EventsReadParams) -> t.EventsReadResult:
        views, next, head = await self.daemon.subscriptions.page(p.after, p.session_id,
                                                                 p.limit)
        return t.EventsReadResult(events=views, next=next, head=head)

    @handles(m.EVENTS_UNSUBSCRIBE)
    async def events_unsubscribe(self, conn: Connection,
                                 p: t.EventsUnsubscribeParams) -> t.EventsUnsubscribeResult:
        await self.daemon.subscriptions.unsubscribe(conn, p.subscription_id)
        return t.EventsUnsubscribeResult(unsubscribed=True)

    @handles(m.PLUGIN_PRODUCER_SEND)
    async def plugin_producer_send(self, conn: Connection,
                                   p: t.ProducerSendParams) -> t.ProducerAccepted:
        # The 256 KiB cap is the engine's (producers.check_mail): it holds for in-process
        # plugins too.
        return await self.accept(p.session_id, p.body, Owner.PLUGIN, Mode.QUEUE,
                                 p.idempotency_key)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_package)
    except PackageNotFoundError:
        return "0+unknown"


def _proved(conn: Connection, method: m.Method[Any, Any]) -> InvalidRequest:
    # A TCP connection's handshake is answered before dispatch (handshake.py); what reaches
    # here came on a connection that needs no proof, or has given it.
    how = "it has proved itself already" if conn.handshake else "it is the Unix socket or stdio"
    return InvalidRequest(f"{method.name}: this connection needs no proof ({how}); send it only as "
                          "a TCP connection's first requests")


def install(daemon: Daemon) -> None:
    """Bind every registered handler to the object it is a method of (``Methods`` here, the
    external sessions' ``External``, the senders' ``Receipts``); a method without one is
    refused here, at start."""
    external = daemon.external = External(daemon)
    daemon.handlers = ROUTES.bind(Methods(daemon), external, Receipts(daemon))
