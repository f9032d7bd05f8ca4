"""The MCP server's connections to the daemon: one per session token, bound to its session.

Each token gets its own daemon connection, bound by ``external.bind``: the daemon, not this
server, decides which session a call acts as, and checks the token again at every call. A
connection that broke (the daemon restarted) is dropped and opened again at the next call;
the mail its last ``check_mail`` claimed was released by the daemon's recovery, so it comes
again, never twice.

New mail reaches a bound connection as an ``external/mail`` notification; the link hands it
to ``on_mail``, which the MCP server sets to announce it to its clients.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.errors import ExternalDaemonGone, NotOwner
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.methods import Method

__all__ = ["Connect", "Link", "Links", "OnMail"]

Connect = Callable[[], Awaitable[DaemonClient]]
OnMail = Callable[[str], Awaitable[None]]  # announces new mail for a session id
P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)


class Link:
    """A daemon connection bound to one external session."""

    def __init__(self, client: DaemonClient, session: t.SessionView, on_mail: OnMail) -> None:
        self.client = client
        self.session = session
        self.on_mail = on_mail
        self.moved = False  # its session's tree is another daemon's now
        self._watch = asyncio.get_running_loop().create_task(self._forward(),
                                                             name="external/mail")

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def broken(self) -> bool:
        return self.moved or self._watch.done()

    async def request(self, method: Method[P, R], params: P) -> R:
        try:
            # Not followed: another daemon's connection is not bound to this session.
            return await self.client.request(method, params, follow=False)
        except RpcFailure as failure:
            if _not_owner(failure):  # the tree moved: the next call binds where it is now
                self.moved = True
            raise
        except ConnectionError:
            raise _gone(f"{method.name} may or may not have taken effect before it went away (a "
                        "send_message may have been accepted: ask before sending it again)"
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
    """The bound daemon connections of this server, by token."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self.on_mail: OnMail = _nobody  # the server that announces mail sets it
        self._links: dict[str, Link] = {}
        self._lock = asyncio.Lock()

    async def get(self, token: str) -> Link:
        """The link bound by ``token``; an ``RpcFailure`` (unknown or revoked token) or
        ``ExternalDaemonGone`` when there can be none."""
        async with self._lock:
            link = self._links.get(token)
            if link is not None and not link.broken:
                return link
            if link is not None:
                await link.close()
                del self._links[token]
            try:
                client = await self._connect()
            except (OSError, ConnectionError):
                raise _gone("nothing was done") from None
            try:
                bound, client = await _bind(client, token)
            except BaseException:
                await client.close()
                raise
            link = self._links[token] = Link(client, bound.session, self._announce)
            return link

    async def _announce(self, session_id: str) -> None:
        await self.on_mail(session_id)  # read at each mail: set after the links were made

    async def verify(self, token: str) -> Link | None:
        """The link, its token checked by the daemon now; None for a token it refuses."""
        try:
            link = await self.get(token)
            await link.request(m.EXTERNAL_TOOLS, t.Empty())
        except RpcFailure:
            await self.forget(token)
            return None
        return link

    async def forget(self, token: str) -> None:
        async with self._lock:
            link = self._links.pop(token, None)
        if link is not None:
            await link.close()

    async def close(self) -> None:
        for token in list(self._links):
            await self.forget(token)


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


def _not_owner(failure: RpcFailure) -> bool:
    return failure.error.data is not None and failure.error.data.code == NotOwner.code


async def _nobody(session_id: str) -> None:
    return None


def _gone(outcome: str) -> ExternalDaemonGone:
    return ExternalDaemonGone(
        f"the treemail daemon is not reachable (stopped or restarting); {outcome}. Call again "
        "once it is back: mail check_mail returned and no later call consumed comes again")
