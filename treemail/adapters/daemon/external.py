"""External sessions over the wire: attach and tokens for the user, and bound connections.

A connection that sends ``external.bind`` with a session token is bound to that session for
its life: the daemon answers it only ``external.tools``, ``external.check_mail`` and
``external.call``, each as that session, and checks the token again at every call (a revoked
token stops a bound connection at its next call). So the binding is the daemon's, not its
client's: an MCP server that passed an agent's request along with another argument still
acts as the session its token names.

The boundary (``treemail.core.external``): ``check_mail`` claims the mail it returns into a
request the connection holds; the connection's next session call commits it (consumed), and
a connection that ends first aborts it (released, delivered again).

Its methods register in the daemon's one table (``routes.ROUTES``), by their constants; the
daemon asks ``gate`` before each dispatch and calls ``closed`` when a connection ends.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from treemail.adapters.daemon.connection import Connection
from treemail.adapters.daemon.errors import ExternalScope
from treemail.adapters.daemon.routes import ROUTES
from treemail.adapters.daemon.views import sent_view, session_view
from treemail.adapters.runtime.llm import ToolCall
from treemail.core import external, results
from treemail.core.errors import InvalidRequest, UnknownTool
from treemail.core.records import Message, Session, ToolContext
from treemail.core.runs import Request
from treemail.core.store import WriteTxn
from treemail.core.tools import lookup_tool
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.jsonrpc import encode_notice

if TYPE_CHECKING:
    from treemail.adapters.daemon.server import Daemon

__all__ = ["MCP_TOOLS", "SESSION_METHODS", "External"]

# What a bound connection may call: the session's own methods (and initialize, before).
SESSION_METHODS = frozenset(
    method.name for method in (m.EXTERNAL_TOOLS, m.EXTERNAL_CHECK_MAIL, m.EXTERNAL_CALL))
_BOUND_ALLOWED = SESSION_METHODS | {m.INITIALIZE.name}

# The tools an external session may call, when its rules offer them. Delegating stays the
# user's (``treemail attach``): an external agent has no model request to run a child for.
MCP_TOOLS = ("get_subagent_result", "send_message", "message_status", "cancel_message")


handles = ROUTES.handles


@attrs.define
class Binding:
    session_id: str
    token: str
    claim: tuple[str, str] | None = None  # (run_id, request_id) of check_mail's request


class External:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.rt = daemon.runtime
        self.engine = daemon.runtime.engine
        self.bound: dict[Connection, Binding] = {}
        self.rt.on_external = self.wake

    # -- the daemon's hooks ------------------------------------------------------------------

    def gate(self, conn: Connection, method: str) -> None:
        """Refuse what a connection may not call: a bound one, anything but its session's
        methods; an unbound one, those methods."""
        binding = self.bound.get(conn)
        if binding is not None and method not in _BOUND_ALLOWED:
            raise ExternalScope(
                f"{method}: this connection is bound to external session "
                f"{binding.session_id} and may call only {', '.join(sorted(SESSION_METHODS))}",
                method=method)
        if binding is None and method in SESSION_METHODS:
            raise ExternalScope(f"{method} acts as an external session: send external.bind "
                                "with the session's token first", method=method)

    async def closed(self, conn: Connection) -> None:
        """The connection ended: mail its last check_mail claimed is released."""
        binding = self.bound.pop(conn, None)
        if binding is not None and binding.claim is not None and not self.rt.closing:
            await self._settle(binding, committed=False)

    def session_of(self, conn: Connection) -> str | None:
        """The session ``conn`` is bound to (the daemon's owner check of its calls)."""
        binding = self.bound.get(conn)
        return None if binding is None else binding.session_id

    def wake(self, session_id: str) -> None:
        """New mail for an external session: tell the connections bound to it."""
        note = encode_notice(m.EXTERNAL_MAIL, x.ExternalMailNotification(session_id=session_id))
        for conn, binding in list(self.bound.items()):
            if binding.session_id == session_id and not conn.closed:
                conn.spawn(conn.send(note), f"{conn.name} external/mail")

    # -- the user's methods ------------------------------------------------------------------

    @handles(m.EXTERNAL_ATTACH)
    async def attach(self, conn: Connection,
                     p: x.ExternalAttachParams) -> x.ExternalAttachResult:
        if p.agent not in self.rt.agents:
            raise InvalidRequest(f"no agent {p.agent!r}; known agents: "
                                 f"{', '.join(sorted(self.rt.agents))}", agent=p.agent)
        spec = self.rt.agent(p.agent).spec
        session, token = await self.rt.writer(
            self.engine.attach, p.parent_session_id, spec, _secret(), p.description)
        self.rt.external.add(session.session_id)
        return x.ExternalAttachResult(session=session_view(session), token=token,
                                      token_id=_token_id(token))

    @handles(m.EXTERNAL_TOKENS_ISSUE)
    async def issue(self, conn: Connection,
                    p: x.ExternalTokenIssueParams) -> x.ExternalTokenIssueResult:
        secret = _secret()
        token: str = await self._write(p.session_id,
                                      lambda tx: external.issue(tx, p.session_id, secret))
        return x.ExternalTokenIssueResult(token=token, token_id=_token_id(token))

    @handles(m.EXTERNAL_TOKENS_LIST)
    async def tokens(self, conn: Connection,
                     p: x.ExternalTokensListParams) -> x.ExternalTokensListResult:
        def read() -> list[external.TokenInfo]:
            with self.engine.store.read() as tx:
                return external.tokens(tx, p.session_id)

        found: list[external.TokenInfo] = await self.rt.writer.quiet(read)
        return x.ExternalTokensListResult(tokens=[_token_view(info) for info in found])

    @handles(m.EXTERNAL_TOKENS_REVOKE)
    async def revoke(self, conn: Connection,
                     p: x.ExternalTokenRevokeParams) -> x.ExternalTokenView:
        info: external.TokenInfo = await self._write(
            None, lambda tx: external.revoke(tx, p.token_id))
        return _token_view(info)

    # -- a bound connection's methods --------------------------------------------------------

    @handles(m.EXTERNAL_BIND)
    async def bind(self, conn: Connection, p: x.ExternalBindParams) -> x.ExternalBindResult:
        if conn in self.bound:
            raise InvalidRequest("this connection is bound already; a connection is bound "
                                 "once, to one session")
        session = await self._resolve(p.token)
        self.bound[conn] = Binding(session.session_id, p.token)
        return x.ExternalBindResult(session=session_view(session), tools=self._tools(session))

    @handles(m.EXTERNAL_TOOLS)
    async def tools(self, conn: Connection, p: t.Empty) -> x.ExternalToolsResult:
        _, session = await self._session(conn)
        return x.ExternalToolsResult(tools=self._tools(session))

    @handles(m.EXTERNAL_CHECK_MAIL)
    async def check_mail(self, conn: Connection, p: t.Empty) -> x.ExternalCheckMailResult:
        binding, session = await self._session(conn)
        await self._consume(binding)
        request: Request | None = await self._write(
            session.session_id, lambda tx: external.check_mail(
                tx, self.engine.ids, session.session_id, self.engine.agents,
                self.engine.instant, self.engine.ttl))
        if request is None:
            return x.ExternalCheckMailResult(messages=[])
        binding.claim = (request.run_id, request.request_id)
        if self.bound.get(conn) is not binding:  # the connection ended meanwhile
            await self._settle(binding, committed=False)
        return x.ExternalCheckMailResult(messages=[
            x.ExternalMail(message_id=d.message_id, owner=d.owner.value, text=d.text)
            for d in request.deliveries])

    @handles(m.EXTERNAL_CALL)
    async def call(self, conn: Connection, p: x.ExternalCallParams) -> x.ExternalCallResult:
        binding, session = await self._session(conn)
        await self._consume(binding)
        try:
            lookup_tool(p.name, self._tools(session))
        except UnknownTool as unknown:
            return x.ExternalCallResult(content=results.error_text(unknown), is_error=True)
        run_id: str = await self._write(
            session.session_id,
            lambda tx: external.turn_run(tx, self.engine.ids, session.session_id))
        current: Session = await self.rt.writer.quiet(self.engine.session, session.session_id)
        # Kept by session, not run: a retry after the daemon restarted comes in another run.
        outcome = await self.rt.tools.execute(current, run_id,
                                              ToolCall(p.tool_call_id, p.name, p.arguments),
                                              replay_slot=external.CALL_SLOT)
        for target in outcome.poke:
            self.rt.poke(target)
        if outcome.approval is not None:
            ctx = ToolContext(session.session_id, run_id, p.tool_call_id)
            held = await self.rt.writer(self.engine.hold_for_approval, ctx, p.name,
                                        p.arguments, str(outcome.approval.details.get("label")))
            return x.ExternalCallResult(content=outcome.content, is_error=True,
                                        approval_id=held.approval_id)
        answer = results.read_text(outcome.content)
        refused = "error" in answer
        return x.ExternalCallResult(
            content=outcome.content, is_error=refused,
            accepted=None if refused else await sent_view(p.name, outcome.content, self._message))

    # -- helpers -----------------------------------------------------------------------------

    def _tools(self, session: Session) -> list[str]:
        offered = set(self.rt.tools.visible(session))
        return [name for name in MCP_TOOLS if name in offered]

    async def _resolve(self, token: str) -> Session:
        def read() -> Session:
            with self.engine.store.read() as tx:
                return external.resolve(tx, token)

        session: Session = await self.rt.writer.quiet(read)
        return session

    async def _session(self, conn: Connection) -> tuple[Binding, Session]:
        """The bound session, its token checked again: a revoked one is refused now."""
        binding = self.bound[conn]  # gate let only bound connections through
        return binding, await self._resolve(binding.token)

    async def _consume(self, binding: Binding) -> None:
        """The client made its next call: what its check_mail returned is consumed."""
        if binding.claim is not None:
            await self._settle(binding, committed=True)

    async def _settle(self, binding: Binding, committed: bool) -> None:
        assert binding.claim is not None
        run_id, request_id = binding.claim
        binding.claim = None
        session_id = binding.session_id
        await self._write(session_id, lambda tx: external.settle(
            tx, session_id, run_id, request_id, committed, self.engine.instant))

    async def _write(self, session_id: str | None, work: Callable[[WriteTxn], Any]) -> Any:
        """``work`` in one write transaction, on the writer lane of ``session_id``'s tree: the
        lane is found from a call's first argument, so the session goes first (None: a write
        that names no session, on the first lane)."""
        return await self.rt.writer(self._transact, session_id, work)

    def _transact(self, session_id: str | None, work: Callable[[WriteTxn], Any]) -> Any:
        return self.engine.store.transact(work)

    async def _message(self, message_id: str) -> Message:
        message: Message = await self.rt.writer.quiet(self.engine.message, message_id)
        return message


def _secret() -> str:
    # 32 bytes from the OS CSPRNG: a token can be neither guessed nor derived from its digest.
    return secrets.token_urlsafe(32)


def _token_id(token: str) -> str:
    return external.digest(token)[:external.TOKEN_ID_DIGITS]


def _token_view(info: external.TokenInfo) -> x.ExternalTokenView:
    s = info.session
    return x.ExternalTokenView(token_id=info.token_id, session_id=s.session_id,
                               root_session_id=s.root_session_id, handle=s.handle,
                               agent=s.agent.name, revoked=info.revoked)



