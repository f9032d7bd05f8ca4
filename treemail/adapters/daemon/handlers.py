"""The methods of protocol 19, over the runtime: each takes decoded params, returns a result.

Reads go through the runtime's writer thread too (``writer.quiet``): one thread owns the
store, and a read never blocks the event loop.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from treemail import __name__ as _package
from treemail.adapters.daemon import pages
from treemail.adapters.daemon.connection import Connection
from treemail.adapters.daemon.external import External
from treemail.adapters.runtime.agent_docs import build_agents
from treemail.adapters.runtime.llm import ToolCall
from treemail.core.agents import AgentDoc, parse_agent_doc
from treemail.core.errors import InvalidRequest, InvalidToolContext, UnsupportedVersion
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState
from treemail.core.producers import PLUGIN_BODY_MAX_BYTES, Produced
from treemail.core.records import (
    Approval,
    Event,
    Message,
    Mode,
    Owner,
    RecipientState,
    Run,
    Session,
    ToolContext,
)
from treemail.protocol import types as t
from treemail.protocol.methods import METHODS, NOTIFICATIONS, PROTOCOL_VERSION

if TYPE_CHECKING:
    from treemail.adapters.daemon.server import Daemon, Handler
    from treemail.adapters.runtime.runtime import Agent

__all__ = ["SERVER_NAME", "install", "message_view", "session_view"]

SERVER_NAME = "treemail-daemon"


def session_view(session: Session) -> t.SessionView:
    return t.SessionView(
        session_id=session.session_id, root_session_id=session.root_session_id,
        parent_session_id=session.parent_session_id, handle=session.handle,
        agent=session.agent.name, state=session.state, run_id=session.run_id,
        live=session.live)


def message_view(message: Message) -> t.MessageView:
    return t.MessageView(
        message_id=message.message_id, recipient=message.recipient, sender=message.sender,
        owner=message.owner.value, mode=message.mode.value, state=message.state,
        body=message.body, run_id=message.run_id, reason=message.reason)


def run_view(run: Run) -> t.RunView:
    return t.RunView(run_id=run.run_id, session_id=run.session_id, number=run.number,
                     status=run.status.value, base_hop=run.base_hop)


def accepted_view(message: Message, mode: str, recipient_state: str) -> t.ProducerAccepted:
    """An accept as its sender sees it; ``agent_hop`` only for agent mail."""
    return t.ProducerAccepted(
        message_id=message.message_id, session_id=message.recipient,
        owner=message.owner.value, mode=mode, recipient_state=recipient_state,
        agent_hop=message.hop if message.owner is Owner.AGENT else None)


def approval_view(a: Approval) -> t.ApprovalView:
    return t.ApprovalView(
        approval_id=a.approval_id, session_id=a.session_id, run_id=a.run_id,
        tool_call_id=a.tool_call_id, tool=a.tool, arguments=dict(a.arguments), label=a.label,
        state=a.state.value, scope=a.scope,
        outcome=a.outcome.text() if a.outcome is not None else None)



class Methods:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.rt = daemon.runtime
        self.engine = daemon.runtime.engine

    async def read(self, fn: Any, *args: Any) -> Any:
        return await self.rt.writer.quiet(fn, *args)

    async def auth_challenge(self, conn: Connection,
                             p: t.AuthChallengeParams) -> t.AuthChallengeResult:
        raise _proved(conn, "auth.challenge")

    async def auth_prove(self, conn: Connection, p: t.AuthProveParams) -> t.AuthProveResult:
        raise _proved(conn, "auth.prove")

    async def initialize(self, conn: Connection, p: t.InitializeParams) -> t.InitializeResult:
        if p.protocol_version != PROTOCOL_VERSION:
            raise UnsupportedVersion(
                f"protocol version {p.protocol_version} is not supported; this daemon speaks "
                f"protocol_version {PROTOCOL_VERSION}", asked=p.protocol_version,
                supported=PROTOCOL_VERSION)
        if conn.initialized:
            raise InvalidRequest("this connection is already initialized; initialize once")
        conn.initialized = True
        conn.capabilities = p.capabilities
        if p.capabilities.plugin_events:  # live from now on
            self.daemon.subscriptions.plugin_events(conn, await self.daemon.subscriptions.head())
        limits = self.daemon.limits
        return t.InitializeResult(
            protocol_version=PROTOCOL_VERSION,
            server_info=t.ServerInfo(name=SERVER_NAME, version=_version()),
            capabilities=t.ServerCapabilities(
                methods=sorted(self.daemon.handlers), notifications=sorted(NOTIFICATIONS),
                max_frame_bytes=limits.max_frame_bytes, max_in_flight=limits.max_in_flight,
                plugin_body_max_bytes=PLUGIN_BODY_MAX_BYTES))

    async def shutdown(self, conn: Connection, p: t.Empty) -> t.ShutdownResult:
        self.daemon.request_stop()
        return t.ShutdownResult(shutting_down=True)

    async def session_create(self, conn: Connection,
                             p: t.SessionCreateParams) -> t.SessionView:
        if (p.agent is None) == (p.agent_doc is None):
            raise InvalidRequest("session.create takes exactly one of agent (a known agent's "
                                 "name) and agent_doc (an agent doc's text)")
        # Every doc is parsed, and every agent built, before any is kept or registered: a
        # bad one changes nothing.
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
        return session_view(await self.rt.create_root(name))

    def _register(self, docs: list[AgentDoc], built: dict[str, Agent]) -> None:
        """Add (or replace) the agents the docs define, built with the daemon's model."""
        tool_agents = self.rt.tools.agents
        assert isinstance(tool_agents, dict)  # the runtime built it as a dict of specs
        for doc in docs:
            self.rt.agents[doc.spec.name] = built[doc.spec.name]
            tool_agents[doc.spec.name] = doc.spec

    async def session_get(self, conn: Connection, p: t.SessionGetParams) -> t.SessionView:
        return session_view(await self.read(self.engine.session, p.session_id))

    async def session_list(self, conn: Connection,
                           p: t.SessionListParams) -> t.SessionListResult:
        found, next = await self.read(pages.sessions, self.engine, p.root_session_id, p.after,
                                      p.limit)
        return t.SessionListResult(sessions=[session_view(s) for s in found], next=next)

    async def run_submit(self, conn: Connection, p: t.RunSubmitParams) -> t.ProducerAccepted:
        return await self.accept(p.session_id, p.text, Owner.USER, Mode.QUEUE,
                                 p.idempotency_key)

    async def accept(self, sid: str, text: str, owner: Owner, mode: Mode,
                     key: str | None = None) -> t.ProducerAccepted:
        """Accept mail and wake the session. ``recipient_state`` is the state the mail found
        when it was accepted (a keyed retry's, the first accept's), not a later one."""
        produced: Produced = await self.rt.writer(
            lambda: self.engine.produce(sid, text, owner, mode=mode, key=key))
        if not produced.replayed:
            self.rt.poke(sid)
        return await self.accepted(produced.result.message_id,
                                   produced.result.recipient_state)

    async def run_steer(self, conn: Connection, p: t.RunSteerParams) -> t.ProducerAccepted:
        return await self.accept(p.session_id, p.text, Owner.USER, Mode.STEER,
                                 p.idempotency_key)

    async def accepted(self, message_id: str,
                       state: RecipientState) -> t.ProducerAccepted:
        """The accept as the sender sees it; ``mode`` is the effective one: steer only when
        the mail joined a run in flight."""
        message: Message = await self.read(self.engine.message, message_id)
        joined = message.mode is Mode.STEER and message.run_id is not None
        return accepted_view(message, "steer" if joined else "queue", state.value)

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

    async def run_get(self, conn: Connection, p: t.RunGetParams) -> t.RunView:
        return run_view(await self.read(self.engine.run, p.run_id))

    async def run_list(self, conn: Connection, p: t.RunListParams) -> t.RunListResult:
        found, next = await self.read(pages.runs, self.engine, p.session_id, p.after, p.limit)
        return t.RunListResult(runs=[run_view(r) for r in found], next=next)

    async def message_list(self, conn: Connection,
                           p: t.MessageListParams) -> t.MessageListResult:
        found, next = await self.read(pages.messages, self.engine, p.session_id, p.after,
                                      p.limit, p.pending_only)
        return t.MessageListResult(messages=[message_view(m) for m in found], next=next)

    async def message_get(self, conn: Connection, p: t.MessageGetParams) -> t.MessageReceipt:
        message: Message = await self.read(self.engine.message, p.message_id)
        events: list[Event] = await self.read(self.engine.events, message.recipient)
        history = [
            t.MessageHistoryEntry(seq=e.seq, kind=e.kind, run_id=_text(e.data, "run_id"),
                                  request_id=_text(e.data, "request_id"),
                                  reason=_text(e.data, "reason"))
            for e in events if e.data.get("message_id") == p.message_id
            and e.kind in _MAIL_KINDS]
        return t.MessageReceipt(message=message_view(message), history=history)

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
                                    accepted=await self._sent(p.name, outcome.content))
        ctx = ToolContext(session.session_id, session.run_id, p.tool_call_id)
        held: Approval = await self.rt.writer(
            self.engine.hold_for_approval, ctx, p.name, p.arguments,
            str(outcome.approval.details.get("label")))
        return t.ToolCallResult(content=outcome.content, approval_id=held.approval_id)

    async def _sent(self, tool: str, content: str) -> t.ProducerAccepted | None:
        """The mail a successful send_message call accepted, read back from the store."""
        result = _json(content) if tool == "send_message" else None
        if result is None or not isinstance(result.get("message_id"), str):
            return None  # refused: the content is the tool error, nothing was accepted
        message: Message = await self.read(self.engine.message, result["message_id"])
        return accepted_view(message, str(result.get("mode")),
                             str(result.get("recipient_state")))

    async def approval_list(self, conn: Connection,
                            p: t.ApprovalListParams) -> t.ApprovalListResult:
        approvals: list[Approval] = await self.rt.writer.quiet(
            lambda: self.engine.approvals(pending=p.pending_only))
        return t.ApprovalListResult(approvals=[approval_view(a) for a in approvals])

    async def approval_answer(self, conn: Connection,
                              p: t.ApprovalAnswerParams) -> t.ApprovalView:
        return approval_view(await self.rt.answer(p.approval_id, p.approve, p.scope))

    async def events_subscribe(self, conn: Connection,
                               p: t.EventsSubscribeParams) -> t.EventsSubscribeResult:
        if p.after < 0:
            raise InvalidRequest("after is a feed number: 0 (the start) or more")
        head = await self.daemon.subscriptions.head()
        sub_id = await self.daemon.subscriptions.subscribe(conn, p.after, p.session_id)
        return t.EventsSubscribeResult(subscription_id=sub_id, head=head)

    async def events_read(self, conn: Connection,
                          p: t.EventsReadParams) -> t.EventsReadResult:
        if p.after < 0:
            raise InvalidRequest("after is a feed number: 0 (the start) or more")
        views, next, head = await self.daemon.subscriptions.page(p.after, p.session_id,
                                                                 p.limit)
        return t.EventsReadResult(events=views, next=next, head=head)

    async def events_unsubscribe(self, conn: Connection,
                                 p: t.EventsUnsubscribeParams) -> t.EventsUnsubscribeResult:
        await self.daemon.subscriptions.unsubscribe(conn, p.subscription_id)
        return t.EventsUnsubscribeResult(unsubscribed=True)

    async def plugin_producer_send(self, conn: Connection,
                                   p: t.ProducerSendParams) -> t.ProducerAccepted:
        # The 256 KiB cap is the engine's (producers.check_mail): it holds for in-process
        # plugins too.
        return await self.accept(p.session_id, p.body, Owner.PLUGIN, Mode.QUEUE,
                                 p.idempotency_key)


# The kinds that record a message's lifecycle steps: its receipt's history.
_MAIL_KINDS = frozenset(k for k in EventKind if k.name.startswith("PRODUCER_MESSAGE_"))


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _text(data: object, key: str) -> str | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_package)
    except PackageNotFoundError:
        return "0+unknown"


def _proved(conn: Connection, method: str) -> InvalidRequest:
    # A TCP connection's handshake is answered before dispatch (handshake.py); what reaches
    # here came on a connection that needs no proof, or has given it.
    how = "it has proved itself already" if conn.handshake else "it is the Unix socket or stdio"
    return InvalidRequest(f"{method}: this connection needs no proof ({how}); send it only as "
                          "a TCP connection's first requests")


def install(daemon: Daemon) -> None:
    """Bind every method of the table to its implementation: ``session.create`` to
    ``Methods.session_create``; a method without one is a bug caught here, at start."""
    methods = Methods(daemon)
    daemon.external = External(daemon)
    own = daemon.external.handlers()  # external sessions' methods live in external.py
    table: dict[str, Handler] = {}
    for name in METHODS:
        table[name] = own.get(name) or getattr(methods, name.replace(".", "_").replace("/", "_"))
    daemon.handlers = table

