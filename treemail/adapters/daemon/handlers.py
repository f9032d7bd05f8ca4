"""The methods of protocol 19, over the runtime: each takes decoded params, returns a result.

Reads go through the runtime's writer thread too (``writer.quiet``): one thread owns the
store, and a read never blocks the event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from treemail import __name__ as _package
from treemail.adapters.agent_docs import build_agents
from treemail.adapters.daemon.connection import Connection
from treemail.core.agents import parse_agent_doc
from treemail.core.errors import InvalidRequest
from treemail.core.records import Message, Owner, Session
from treemail.core.sending import REPORTED
from treemail.protocol import errors
from treemail.protocol import types as t
from treemail.protocol.methods import METHODS, NOTIFICATIONS, PROTOCOL_VERSION

if TYPE_CHECKING:
    from treemail.adapters.daemon.server import Daemon, Handler

__all__ = ["SERVER_NAME", "install", "message_view", "session_view"]

SERVER_NAME = "treemail-daemon"
PLUGIN_BODY_MAX_BYTES = 256 * 1024


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




class Methods:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.rt = daemon.runtime
        self.engine = daemon.runtime.engine

    async def read(self, fn: Any, *args: Any) -> Any:
        return await self.rt.writer.quiet(fn, *args)

    async def initialize(self, conn: Connection, p: t.InitializeParams) -> t.InitializeResult:
        if p.protocol_version != PROTOCOL_VERSION:
            from treemail.adapters.daemon.server import WireError

            raise WireError(errors.unsupported_version(p.protocol_version, PROTOCOL_VERSION))
        if conn.initialized:
            raise InvalidRequest("this connection is already initialized; initialize once")
        conn.initialized = True
        conn.capabilities = p.capabilities
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
        name = p.agent if p.agent is not None else self._register(p.agent_doc or "")
        if name not in self.rt.agents:
            raise InvalidRequest(f"no agent {name!r}; known agents: "
                                 f"{', '.join(sorted(self.rt.agents))}", agent=name)
        return session_view(await self.rt.create_root(name))

    def _register(self, text: str) -> str:
        """Add (or replace) the agent an agent doc defines, with the daemon's model."""
        doc = parse_agent_doc(text, source="session.create agent_doc")
        agents = build_agents({doc.spec.name: doc}, self.daemon.model_for)
        self.rt.agents[doc.spec.name] = agents[doc.spec.name]
        tool_agents = self.rt.tools.agents
        assert isinstance(tool_agents, dict)  # the runtime built it as a dict of specs
        tool_agents[doc.spec.name] = doc.spec
        return doc.spec.name

    async def session_get(self, conn: Connection, p: t.SessionGetParams) -> t.SessionView:
        return session_view(await self.read(self.engine.session, p.session_id))

    async def session_list(self, conn: Connection,
                           p: t.SessionListParams) -> t.SessionListResult:
        sessions: list[Session] = await self.read(self.engine.sessions)
        return t.SessionListResult(sessions=[
            session_view(s) for s in sessions
            if p.root_session_id is None or s.root_session_id == p.root_session_id])

    async def run_submit(self, conn: Connection, p: t.RunSubmitParams) -> t.ProducerAccepted:
        message_id = await self.rt.submit(p.session_id, p.text, Owner.USER)
        return await self.accepted(message_id)

    async def accepted(self, message_id: str) -> t.ProducerAccepted:
        message: Message = await self.read(self.engine.message, message_id)
        session: Session = await self.read(self.engine.session, message.recipient)
        return t.ProducerAccepted(
            message_id=message_id, session_id=message.recipient, owner=message.owner.value,
            mode=message.mode.value, recipient_state=REPORTED[session.state].value,
            agent_hop=message.hop if message.owner is Owner.AGENT else None)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_package)
    except PackageNotFoundError:
        return "0+unknown"


def install(daemon: Daemon) -> None:
    """Bind every method of the table to its implementation: ``session.create`` to
    ``Methods.session_create``; a method without one is a bug caught here, at start."""
    methods = Methods(daemon)
    table: dict[str, Handler] = {}
    for name in METHODS:
        table[name] = getattr(methods, name.replace(".", "_").replace("/", "_"))
    daemon.handlers = table

