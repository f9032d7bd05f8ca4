"""``treemail mcp``: an MCP server through which an MCP client is an external session.

The server holds no identity of its own. Every request carries one: over stdio the token read
from ``--token-file`` at launch (set as the request's access token for the process's life),
over streamable HTTP the bearer token of that very request, checked by the daemon
(``Bearer``). Tools read it with ``get_access_token()`` and act through the daemon
connection that token bound (``links.py``); no tool argument names a sender, and an argument
that tries is refused by the daemon's strict argument check like any unknown argument.

Tools: ``check_mail`` always; ``send_message`` and ``get_subagent_result`` when the session's
rules offer them now (asked of the daemon at each listing). Their schemas are the hosted
agents' own (``treemail.core.tools``), and so are their errors, results and guards: the daemon
runs them through the same tool box as a hosted agent's calls.

Over HTTP, each MCP session gets a daemon connection of its own (``Links``), closed when the
MCP session ends (the client's DELETE, the SDK's idle timeout, a crash): the mail that
session's last check_mail claimed is released then, and another MCP session's is not touched.

A tool call has an id of its own, derived from the MCP call (``call_id``): the request id,
which a client numbers per MCP session, with a random nonce of that MCP session and the
external session. The daemon remembers a send under it, so when the daemon connection is lost
before the answer and the call is sent again, a send that took effect is answered, not made
twice.

Wake-up: new mail for the session updates its resource ``treemail://mail/<session id>``,
published to the clients that listen for it (``subscriptions/listen``) and sent as a
``notifications/resources/updated`` to clients on earlier protocol versions, so a client need
not poll; ``check_mail`` works without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import uuid
import weakref
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.mcpserver import MCPServer
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import CallToolResult, ListToolsResult, TextContent
from mcp.types import Tool as MCPTool

from treemail.adapters.daemon.client import RpcFailure
from treemail.adapters.daemon.errors import ExternalScope
from treemail.adapters.mcp.links import Link, Links
from treemail.core.errors import InvalidToolArguments, SessionTokenUnknown, TreemailError
from treemail.core.tools import TOOLS, function_parameters
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t

__all__ = ["CHECK_MAIL", "MAIL_URI", "Bearer", "TreemailMCP", "call_id", "mail_uri",
           "tool_schema"]

CHECK_MAIL = "check_mail"
MAIL_URI = "treemail://mail"

_CHECK_MAIL_DOC = (
    "Read the mail waiting for you: each message as an <agent_message from=...> envelope (or "
    "user, plugin or delegation mail). Your next call to this server confirms you have it; "
    "if this connection ends first, the same mail is delivered again. You are also notified "
    f"(an update of {MAIL_URI}/<your session id>, for subscriptions/listen) when new mail "
    "arrives, so there is no need to poll.")

_INSTRUCTIONS = (
    "You are a member of a treemail delegation tree. check_mail reads your mail; "
    "send_message (when your rules allow it) writes to a peer of your tree by its handle. "
    "Your identity is fixed by this server's token: no argument chooses who you are.")


def tool_schema(name: str) -> dict[str, Any]:
    """The input schema of an MCP tool: a hosted agent's exactly, and check_mail's (none)."""
    if name == CHECK_MAIL:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return function_parameters(name)


def _tool(name: str) -> MCPTool:
    description = _CHECK_MAIL_DOC if name == CHECK_MAIL else TOOLS[name].description
    return MCPTool(name=name, description=description, input_schema=tool_schema(name))


def _error(code: str | None, message: str) -> CallToolResult:
    """A refusal as a tool result, in the shape a hosted agent's tool errors have."""
    import json

    text = json.dumps({"error": code or TreemailError.code, "message": message})
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def call_id(nonce: str, session_id: str, request_id: object) -> str:
    """The daemon's id of one MCP tool call: the client's request id is unique only within
    its MCP session (a new session, or a restarted server, counts from the start again), so
    it is bound to a random nonce of that MCP session and to the external session."""
    made = hashlib.sha256(f"{nonce}\x00{session_id}\x00{request_id}".encode()).hexdigest()
    return f"mcp-{made[:32]}"


def mail_uri(session_id: str) -> str:
    """The resource whose update announces new mail for the session."""
    return f"{MAIL_URI}/{session_id}"


class Bearer(TokenVerifier):
    """HTTP: each request's bearer token, checked by the daemon at that request."""

    def __init__(self, links: Links) -> None:
        self.links = links

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            link = await self.links.verify(token)
        except TreemailError:  # the daemon is away: no one can be admitted now
            return None
        if link is None:
            return None
        return AccessToken(token=token, client_id=link.session_id, scopes=[],
                           subject=link.session_id)


# Keys of this server in an MCP connection's ``state``.
_NONCE = "treemail.nonce"
_SCOPED = "treemail.scoped"


class TreemailMCP(MCPServer[Any]):
    """``per_session``: each MCP session (over HTTP) gets its own daemon connections, closed
    when it ends; without it (stdio) the process is the one MCP session."""

    def __init__(self, links: Links, per_session: bool = False, **options: Any) -> None:
        super().__init__(name="treemail", instructions=_INSTRUCTIONS, log_level="WARNING",
                         **options)
        self.links = links
        self.per_session = per_session
        self._opened: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        links.on_mail = self.mail_arrived
        # Clients on protocols before subscriptions/listen hear of mail on their connection:
        # the connections that called as each session, weakly (an ended one is forgotten).
        self._heard: dict[str, weakref.WeakSet[Any]] = {}

        @self.resource(MAIL_URI + "/{session_id}", name="mail", mime_type="text/plain",
                       description="Your mail box (treemail://mail/<your session id>): "
                                   "updated when new mail arrives; check_mail reads it.")
        def mail(session_id: str) -> str:
            return "New mail is announced by an update of this resource; call check_mail."

    async def mail_arrived(self, session_id: str) -> None:
        """Announce new mail to the clients listening (``subscriptions/listen``) for it."""
        await self._subscriptions.publish(ResourceUpdated(uri=mail_uri(session_id)))
        for connection in list(self._heard.get(session_id, ())):
            # Dropped by the SDK on a connection that listens instead (2026-07-28 on).
            with contextlib.suppress(Exception):
                await connection.send_resource_updated(mail_uri(session_id))

    async def _link(self, listener: Any = None) -> Link:
        access = get_access_token()
        if access is None:  # an HTTP app always has one; stdio sets it at launch
            raise SessionTokenUnknown("this request carries no session token; launch "
                                       "`treemail mcp` with --token-file, or send a bearer "
                                       "token over HTTP")
        if listener is not None:
            # An MCP session keeps the token it was opened with: a request on it that carries
            # another session's token is refused, not served as that other session.
            opened = self._opened.setdefault(listener, access.token)
            if not hmac.compare_digest(opened.encode(), access.token.encode()):
                raise ExternalScope("this MCP session was opened with another session token; "
                                    "open a session of your own with your token")
        connection = _connection(listener)
        link = await self.links.get(access.token, self._scope(connection))
        if connection is not None:
            self._heard.setdefault(link.session_id, weakref.WeakSet()).add(connection)
        return link

    def _scope(self, connection: Any) -> str | None:
        """The MCP session whose daemon connections serve this request; None for the
        token's own (stdio, or a request that belongs to no MCP session)."""
        scope = getattr(connection, "session_id", None) if self.per_session else None
        if scope is None:
            return None
        if not connection.state.get(_SCOPED):
            connection.state[_SCOPED] = True
            # Run by the SDK when the MCP session ends, however it ends: its connections
            # close, and the daemon releases what their last check_mail claimed.
            connection.exit_stack.push_async_callback(self.links.forget_scope, scope)
        return str(scope)

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        await self._link(ctx.session)  # a client that lists its tools hears of its mail
        return await super()._handle_list_tools(ctx, params)

    async def list_tools(self) -> list[MCPTool]:
        link = await self._link()
        names = (await link.request(m.EXTERNAL_TOOLS, t.Empty())).tools
        return [_tool(CHECK_MAIL), *(_tool(name) for name in names)]

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        return tool_schema(name) if name == CHECK_MAIL or name in TOOLS else None

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> CallToolResult:
        listener = context.session if context is not None else None
        try:
            link = await self._link(listener)
            if name == CHECK_MAIL:
                return await self._check_mail(link, arguments)
            connection = _connection(listener)
            # A request with no MCP connection of its own gets a nonce of its own.
            nonce = (connection.state.setdefault(_NONCE, uuid.uuid4().hex)
                     if connection is not None else uuid.uuid4().hex)
            request_id = context.request_context.request_id if context is not None else None
            answer = await self.links.resend(link.key, x.ExternalCallParams(
                tool_call_id=call_id(nonce, link.session_id, request_id), name=name,
                arguments=arguments))
        except RpcFailure as failure:
            return _error(failure.data_code, failure.error.message)
        except TreemailError as error:
            return _error(error.code, error.message)
        return CallToolResult(content=[TextContent(type="text", text=answer.content)],
                              is_error=answer.is_error)

    async def _check_mail(self, link: Link, arguments: dict[str, Any]) -> CallToolResult:
        if arguments:
            refused = InvalidToolArguments(
                f"check_mail takes no arguments; got {', '.join(sorted(map(str, arguments)))}",
                tool=CHECK_MAIL)
            return _error(refused.code, refused.message)
        mail = (await link.request(m.EXTERNAL_CHECK_MAIL, t.Empty())).messages
        texts = [mail_.text for mail_ in mail] or ["No new mail."]
        return CallToolResult(
            content=[TextContent(type="text", text=text) for text in texts],
            structured_content={"messages": [
                {"message_id": one.message_id, "owner": one.owner, "text": one.text}
                for one in mail]})


def _connection(listener: Any) -> Any:
    """The MCP connection of a request (one MCP session, over stdio the process's). The
    request's session object lives as long as its request; its connection as long as the
    client's, and the SDK names it only privately."""
    return getattr(listener, "_connection", None)
