"""The MCP server's connections to the daemon: one per session token and MCP session, bound
to its external session.

Each gets its own daemon connection, bound by ``external.bind``: the daemon, not this server,
decides which session a call acts as, and checks the token again at every call. The claim a
``check_mail`` makes is held by the daemon connection it came on, so a connection per MCP
session (over HTTP, where one server serves many) lets an MCP session that ends release its
own claim, and only its own (``forget_scope``); over stdio the process is the one MCP session.

A connection that broke (the daemon restarted) is dropped and opened again at the next call;
the mail its last ``check_mail`` claimed was released by the daemon, so it comes again, never
twice. A tool call lost with its connection is sent again (``resend``) under the same
``tool_call_id``, which the daemon answers with the first result if the first one took
effect: a send is stored once however often it is repeated.

New mail reaches a bound connection as an ``external/mail`` notification; the token's own
link (scope None) hands it to ``on_mail``, which the MCP server sets to announce it to its
clients, so each mail is announced once however many MCP sessions a token has.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec

from treemail.adapters.daemon.client import DaemonClient, RpcFailure, not_owner
from treemail.adapters.daemon.errors import ExternalDaemonGone
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.methods import Method

__all__ = ["RESEND_SECONDS", "Connect", "Link", "Links", "OnMail"]

Connect = Callable[[], Awaitable[DaemonClient]]
OnMail = Callable[[str], Awaitable[None]]  # announces new mail for a session id
P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)

# How long a tool call lost with its daemon connection is sent again, waiting for the daemon
# to come back (a restart under load takes seconds), before the call is answered with
# ``client:daemon_gone``.
RESEND_SECONDS = 60.0

# A link's key: its token, and the MCP session it serves (None: the token's own link, which
# checks tokens, lists tools and announces mail; over stdio, the process's one MCP session).
Key = tuple[str, str | None]


class Link:
    """A daemon connection bound to one external session."""

    def __init__(self, key: Key, client: DaemonClient, session: t.SessionView,
                 on_mail: OnMail) -> None:
        self.key = key
        self.client = client
        self.session = session
        self.on_mail = on_mail
        self._lost = False
        self.moved = False  # its session's tree is another daemon's now
        self._watch = asyncio.get_running_loop().create_task(self._forward(),
                                                             name="external/mail")

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def broken(self) -> bool:
        return self._lost or self.moved or self._watch.done()

    async def request(self, method: Method[P, R], params: P) -> R:
        try:
            # Not followed: another daemon's connection is not bound to this session.
            return await self.client.request(method, params, follow=False)
        except RpcFailure as failure:
            if not_owner(failure):  # the tree moved: the next call binds where it is now
                self.moved = True
            raise
        except ConnectionError:
            self._lost = True
            raise _gone(f"{method.name} may or may not have taken effect before it went away"
                        ) from None

    async def _forward(self) -> None:
        while True:
            await self.client.next_notification(m.EXTERNAL_MAIL, timeout=None)
            with contextlib.suppress(Exception):  # a client gone is not this link's end
                await self.on_mail(self.session_id)

    async def close(self) -> None:
        self._watch.cancel()
        await asyncio.gather(self._watch, return_exceptions=True)
        await self.client.close()


class Links:
    """The bound daemon connections of this server, by token and MCP session."""

    def __init__(self, connect: Connect, resend_seconds: float = RESEND_SECONDS) -> None:
        self._connect = connect
        self.resend_seconds = resend_seconds
        self.on_mail: OnMail = _nobody  # the server that announces mail sets it
        self._links: dict[Key, Link] = {}
        self._lock = asyncio.Lock()

    async def get(self, token: str, scope: str | None = None) -> Link:
        """The link bound by ``token`` for the MCP session ``scope``; an ``RpcFailure``
        (unknown or revoked token) or ``ExternalDaemonGone`` when there can be none."""
        key = (token, scope)
        async with self._lock:
            link = self._links.get(key)
            if link is not None and not link.broken:
                return link
            if link is not None:
                await link.close()
                del self._links[key]
            try:
                client = await self._connect()
            except (OSError, ConnectionError):
                raise _gone("nothing was done") from None
            try:
                bound, client = await _bind(client, token)
            except BaseException:
                await client.close()
                raise
            link = self._links[key] = Link(
                key, client, bound.session, self._announce if scope is None else _nobody)
            return link

    async def resend(self, key: Key, params: x.ExternalCallParams) -> x.ExternalCallResult:
        """A tool call, sent again over a new connection each time the daemon connection it
        went out on is lost before its answer, until the daemon answers it or
        ``resend_seconds`` have passed. Safe because the daemon answers a repeat of a
        ``tool_call_id`` with the call's first result: a send that took effect before the
        connection went is not made twice."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.resend_seconds
        pause = 0.05
        while True:
            link: Link | None = None
            try:
                link = await self.get(*key)
                return await link.request(m.EXTERNAL_CALL, params)
            except RpcFailure:
                # The tree moved to another daemon sharing the store: the next turn of the
                # loop binds there, and the store's replay slot answers a repeat as before.
                if link is None or not link.moved or loop.time() >= deadline:
                    raise
            except ExternalDaemonGone:
                if loop.time() >= deadline:
                    raise _gone(
                        f"{params.name} was sent again for {self.resend_seconds:g}s without an "
                        "answer, and may have taken effect (a send_message may have been "
                        "accepted). A new call is a new message: make sure it did not arrive "
                        "before you send it again") from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _announce(self, session_id: str) -> None:
        await self.on_mail(session_id)  # read at each mail: set after the links were made

    async def verify(self, token: str) -> Link | None:
        """The token's link, its token checked by the daemon now; None for a token it
        refuses."""
        try:
            link = await self.get(token)
            await link.request(m.EXTERNAL_TOOLS, t.Empty())
        except RpcFailure:
            await self.forget(token)
            return None
        return link

    async def forget(self, token: str) -> None:
        """Close every link of ``token`` (the daemon refused it)."""
        await self._close(lambda key: key[0] == token)

    async def forget_scope(self, scope: str) -> None:
        """Close the links of the MCP session ``scope``, which ended: the daemon releases
        the mail their last check_mail claimed, and no other session's."""
        await self._close(lambda key: key[1] == scope)

    async def _close(self, which: Callable[[Key], bool]) -> None:
        async with self._lock:
            links = [self._links.pop(key) for key in list(self._links) if which(key)]
        for link in links:
            await link.close()

    async def close(self) -> None:
        await self._close(lambda key: True)


async def _bind(client: DaemonClient, token: str) -> tuple[x.ExternalBindResult, DaemonClient]:
    """Bind a connection by ``token``: this one, or, when daemons share the store and
    another owns the session's tree (``daemon:not_owner``), a new one to that daemon (the
    first is closed then). Returns the result and the bound connection."""
    try:
        return await client.request(m.EXTERNAL_BIND, x.ExternalBindParams(token=token),
                                    follow=False), client
    except RpcFailure as failure:
        owner = await client.at_owner(failure)
        if owner is None:
            raise
    await client.close()
    try:
        return await owner.request(m.EXTERNAL_BIND, x.ExternalBindParams(token=token),
                                   follow=False), owner
    except BaseException:
        await owner.close()
        raise


async def _nobody(session_id: str) -> None:
    return None


def _gone(outcome: str) -> ExternalDaemonGone:
    return ExternalDaemonGone(
        f"the treemail daemon is not reachable (stopped or restarting); {outcome}. Call again "
        "once it is back: mail check_mail returned and no later call consumed comes again")
