"""The async client of protocol 19, used by the CLI and the tests.

``DaemonClient.connect`` opens the Unix socket (or ``tcp://HOST:PORT``, where both sides
prove they hold the daemon's token without sending it: ``handshake.py``) and performs the
``initialize`` handshake.
``request(METHOD, params)`` sends a request through one of the method constants of
``treemail.protocol.methods``: ``params`` is that method's params Struct and the answer comes
back decoded into its result type, so a renamed method or field is a type error at every call
site. An error answer raises ``RpcFailure``, whose ``data_code`` is treemail's stable code.
``every`` reads a list method page after page. Notifications land in a bounded queue
(``notifications``; ``next_notification(EVENTS_EVENT)`` takes one, decoded); a server request
(a plugin's tool gate) goes to the handler ``serve`` installed for it. ``call_raw`` sends any
name with any params, its answer undecoded: for tests that speak the protocol wrongly.

No call waits for ever. Each has a timeout (``timeout``, the client's ``DEFAULT_TIMEOUT``
unless told otherwise) that covers sending the request and waiting for its answer, and every
way its answer can fail to come is a ``ClientFailure`` with a stable code, raised at once:

* ``client:request_too_large``: the request's frame is over the daemon's limit (learnt from
  ``initialize``), so it is not sent; a daemon that drops one anyway answers with an error
  whose id is null, which fails the calls whose frames were over the limit it names;
* ``client:answer_too_large``: the answer is over this client's own limit; the splitter keeps
  the first bytes of the line it drops, where the daemon writes the answer's id;
* ``client:timeout``: no answer in time (a stopped or hung daemon);
* ``client:answer_malformed``: the answer does not decode into the method's result type.

A daemon that closes the connection fails every call in flight with ``ConnectionError``.
The connection's frames, and these failures, are ``channel.py``'s; this module builds the
protocol's typed methods on them.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from treemail.adapters.daemon.channel import DEFAULT_TIMEOUT, Channel, RpcFailure
from treemail.adapters.daemon.errors import AnswerMalformed, ClientTimeout, NotOwner, ServerUnproven
from treemail.adapters.daemon.tcp import AUTH_TIMEOUT, NONCE_BYTES, Token, parse_address
from treemail.protocol import types as t
from treemail.protocol.forward import decoded as forward_decoded
from treemail.protocol.methods import (
    AUTH_CHALLENGE,
    AUTH_PROVE,
    INITIALIZE,
    PLUGIN_PRODUCER_SEND,
    PROTOCOL_VERSION,
    RUN_STEER,
    RUN_SUBMIT,
    Call,
    Method,
    Paged,
)

__all__ = ["DEFAULT_TIMEOUT", "Call", "DaemonClient", "RpcFailure", "not_owner"]

P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)
Item = TypeVar("Item", bound=msgspec.Struct)


class DaemonClient(Channel):
    """The protocol's methods, typed, over a ``Channel``."""

    @classmethod
    async def connect(cls, socket: str | Path, *, name: str = "treemail-client",
                      initialize: bool = True, token: str | None = None,
                      timeout: float | None = DEFAULT_TIMEOUT, max_frame_bytes: int = 64 << 20,
                      authenticate: bool = True, **capabilities: bool) -> DaemonClient:
        """``socket`` is the daemon's Unix socket, or ``tcp://HOST:PORT`` for its loopback
        TCP listener, where the listener must prove it holds ``token`` (the daemon's) before
        the client proves it too; ``ServerUnproven`` if it does not. ``authenticate=False``
        and ``initialize=False`` leave the connection raw (tests speak for themselves)."""
        address = str(socket)
        if address.startswith("tcp://"):
            host, port = parse_address(address)
            reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        else:
            reader, writer = await asyncio.open_unix_connection(
                address.removeprefix("unix://"), limit=1 << 20)
        client = cls(reader, writer, timeout=timeout, max_frame_bytes=max_frame_bytes)
        client._token = token  # for a redirect to another daemon's TCP listener
        try:
            if address.startswith("tcp://") and authenticate:
                if token is None:
                    raise _unproven(address, "no token was given to check its proof against")
                await client.authenticate(Token(token), address)
            if initialize:
                client.server = await client.initialize(name, **capabilities)
        except BaseException:
            await client.close()
            raise
        return client

    @property
    def capabilities(self) -> t.ServerCapabilities:
        """What the daemon said it serves, and its limits, in its ``initialize`` answer."""
        if self.server is None:
            raise RuntimeError("this client has not initialized its connection: connect "
                               "with initialize=True, or call initialize first")
        return self.server.capabilities

    async def authenticate(self, token: Token, address: str = "the TCP listener",
                           timeout: float = AUTH_TIMEOUT) -> None:
        """The TCP handshake, client side: the server proves it holds ``token``, and only
        then does the client prove it too. Until the server's proof checks out the client has
        sent a random nonce and nothing else (spec/protocol.md, section 2)."""
        client_nonce = secrets.token_bytes(NONCE_BYTES)
        try:
            answer = await self.call_raw(AUTH_CHALLENGE.name,
                                         {"client_nonce": client_nonce.hex()}, timeout=timeout)
        except ClientTimeout:
            raise _unproven(address, f"it did not answer within {timeout:g}s") from None
        except ConnectionError:
            raise _unproven(address, "it closed the connection") from None
        # Read by hand, not decoded: a listener that is not the daemon may answer anything,
        # and every malformed answer is the one failure, ``ServerUnproven``.
        server_nonce, proof = _challenge_answer(answer)
        if server_nonce is None or not Token.matches(
                token.server_proof(client_nonce, server_nonce), proof):
            raise _unproven(address, "its server_proof is not an HMAC under your token")
        await self.request(AUTH_PROVE, t.AuthProveParams(
            client_proof=token.client_proof(server_nonce, client_nonce).hex()), timeout=timeout)

    async def initialize(self, name: str, version: int = PROTOCOL_VERSION,
                         **capabilities: bool) -> t.InitializeResult:
        return await self.request(INITIALIZE, t.InitializeParams(
            protocol_version=version, client_info=t.ClientInfo(name=name),
            capabilities=t.ClientCapabilities(**capabilities)))

    async def request(self, method: Method[P, R], params: P, *,
                      timeout: float | None = None, follow: bool = True) -> R:
        """The result of one request, decoded into the method's result type; ``timeout``
        seconds (default: the client's) for sending it and for its answer. Answered
        ``daemon:not_owner`` (daemons sharing a store: the tree is another's), it is sent
        once to the daemon named, over a connection of its own, unless ``follow`` is False."""
        (outcome,) = await self.request_many(method, [params], timeout=timeout)
        if follow and isinstance(outcome, BaseException) and (
                other := await self.at_owner(outcome)) is not None:
            try:
                return await other.request(method, params, timeout=timeout, follow=False)
            finally:
                await other.close()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def at_owner(self, failure: BaseException) -> DaemonClient | None:
        """A connection of its own (this client's token and timeout) to the daemon that a
        ``daemon:not_owner`` failure names; None for any other failure. For what must be
        sent there on a connection that stays open (``external.bind``)."""
        owner = _owner(failure) if isinstance(failure, RpcFailure) else None
        if owner is None:
            return None
        return await DaemonClient.connect(owner, token=self._token, timeout=self.timeout)

    async def request_many(self, method: Method[P, R], params: list[P], *,
                           timeout: float | None = None) -> list[R | BaseException]:
        """Pipelined: one request of ``method`` per params, all in one write, then every
        answer in order (a result, or the error it failed with: an ``RpcFailure``, a
        ``ClientFailure``)."""
        return await self.pipeline([Call(method, p) for p in params], timeout=timeout)

    async def pipeline(self, calls: list[Call[Any, Any]], *,
                       timeout: float | None = None) -> list[Any]:
        """Requests of several methods, pipelined like ``request_many``: each answer is its
        method's result type, or the error it failed with."""
        outcomes = await self.call_many_raw([(c.method.name, c.params) for c in calls],
                                            timeout=timeout)
        return [o if isinstance(o, BaseException) else _decoded(c.method, o)
                for c, o in zip(calls, outcomes, strict=True)]

    async def pages(self, method: Paged[P, R, Item], params: P) -> AsyncIterator[list[Item]]:
        """The items of a list method, a page at a time, first to last."""
        while True:
            page = await self.request(method, params)
            yield method.page(page)
            cursor = getattr(page, "next", None)
            if cursor is None:
                return
            params = msgspec.structs.replace(params, after=cursor)

    async def every(self, method: Paged[P, R, Item], params: P) -> list[Item]:
        """Every item of a list method, read page after page."""
        return [item async for page in self.pages(method, params) for item in page]

    # The producer sends. ``idempotency_key`` (optional) makes a retry safe: after a lost
    # answer, the same call with the same key is answered with the first message id.

    async def submit(self, session_id: str, text: str, *,
                     idempotency_key: str | None = None) -> t.ProducerAccepted:
        """``run.submit``: user input for the session's next run."""
        return await self.request(RUN_SUBMIT, t.RunSubmitParams(
            session_id=session_id, text=text, idempotency_key=idempotency_key))

    async def steer(self, session_id: str, text: str, *,
                    idempotency_key: str | None = None) -> t.ProducerAccepted:
        """``run.steer``: user steering that joins the run in flight."""
        return await self.request(RUN_STEER, t.RunSteerParams(
            session_id=session_id, text=text, idempotency_key=idempotency_key))

    async def producer_send(self, session_id: str, body: str, *,
                            idempotency_key: str | None = None) -> t.ProducerAccepted:
        """``plugin/producer/send``: plugin-owned mail into a session."""
        return await self.request(PLUGIN_PRODUCER_SEND, t.ProducerSendParams(
            session_id=session_id, body=body, idempotency_key=idempotency_key))

    async def next_notification(self, method: Method[P, Any],
                                timeout: float | None = 10.0) -> P:
        """The next notification of ``method``, decoded into its params type, waiting up to
        ``timeout`` seconds (None: no limit); others before it are dropped.
        ``ConnectionError`` once the connection is closed and every notification it brought
        has been taken, so a watcher never waits on a daemon that is gone."""
        async with asyncio.timeout(timeout):
            while True:
                note = await self._notification()
                if note.method == method.name:
                    return forward_decoded(method.params, note.params)

    def arrived_notifications(self, method: Method[P, Any], limit: int) -> list[P]:
        """Up to ``limit`` notifications of ``method`` that have already arrived, decoded, in
        order, taken without waiting; others among them are dropped, as ``next_notification``
        drops them. A watcher that fell behind takes its backlog in one go with it."""
        taken: list[P] = []
        while len(taken) < limit and not self.notifications.empty():
            note = self.notifications.get_nowait()
            if note.method == method.name:
                taken.append(forward_decoded(method.params, note.params))
        return taken


def _decoded(method: Method[Any, R], answer: Any) -> R:
    try:
        return forward_decoded(method.result, answer)
    except msgspec.ValidationError as exc:
        raise AnswerMalformed(
            f"the answer to {method.name} is not a {method.result.__name__} ({exc}); the "
            "call may have taken effect: read the state back, and check that the daemon "
            f"speaks protocol {PROTOCOL_VERSION}", method=method.name) from None


def not_owner(failure: RpcFailure) -> bool:
    """Whether the daemon answered ``daemon:not_owner``: the tree is another daemon's."""
    data = failure.error.data
    return data is not None and data.code == NotOwner.code


def _owner(failure: RpcFailure) -> str | None:
    """Where a ``daemon:not_owner`` answer says to go; None for any other failure."""
    data = failure.error.data
    if data is None or not not_owner(failure):
        return None
    owner = data.details.get("owner")
    return owner if isinstance(owner, str) and owner else None


def _challenge_answer(answer: Any) -> tuple[bytes | None, str]:
    """The server's nonce (None if malformed) and proof from an ``auth.challenge`` answer."""
    nonce = answer.get("server_nonce") if isinstance(answer, dict) else None
    proof = answer.get("server_proof") if isinstance(answer, dict) else None
    if not isinstance(nonce, str) or not isinstance(proof, str):
        return None, ""
    try:
        raw = bytes.fromhex(nonce)
    except ValueError:
        return None, ""
    return (raw, proof) if len(raw) == NONCE_BYTES else (None, "")


def _unproven(address: str, why: str) -> ServerUnproven:
    return ServerUnproven(
        f"{address} did not prove it holds the daemon's token ({why}); the client sent it "
        "nothing secret and closed the connection. Either something else listens there (is "
        "your daemon running? another local user may have bound the port while it was "
        "down), or your token is not this daemon's (check TREEMAIL_TOKEN or --token-file)",
        address=address)
