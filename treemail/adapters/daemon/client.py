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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from treemail.adapters.daemon.errors import (
    AnswerMalformed,
    AnswerTooLarge,
    ClientTimeout,
    NotOwner,
    RequestTooLarge,
    ServerUnproven,
)
from treemail.adapters.daemon.tcp import AUTH_TIMEOUT, NONCE_BYTES, Token, parse_address
from treemail.protocol import types as t
from treemail.protocol.errors import rpc_error
from treemail.protocol.framing import FrameSplitter, Oversized
from treemail.protocol.jsonrpc import (
    Failure,
    Notification,
    Reply,
    Request,
    RpcError,
    decode_frame,
    encode_error,
    encode_request,
    encode_result,
)
from treemail.protocol.methods import (
    AUTH_CHALLENGE,
    AUTH_PROVE,
    INITIALIZE,
    PLUGIN_PRODUCER_SEND,
    PROTOCOL_VERSION,
    RUN_STEER,
    RUN_SUBMIT,
    SERVER_REQUESTS,
    Call,
    Method,
    Paged,
)
from treemail.protocol.rpc_errors import FrameTooLarge, InternalError, UnknownMethod

__all__ = ["DEFAULT_TIMEOUT", "Call", "DaemonClient", "RpcFailure"]

# How long a call waits for its answer by default: longer than the daemon's own longest wait
# inside a call (a plugin's tool gate, 30 s), so a slow gate is not taken for a dead daemon.
DEFAULT_TIMEOUT = 60.0

P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)
Item = TypeVar("Item", bound=msgspec.Struct)
# A server request's handler, as ``serve`` keeps it: the raw params in, the result out.
_Served = Callable[[Any], Awaitable[msgspec.Struct]]

# The id of a response, read off the head of a line too large to decode: the daemon writes
# ``jsonrpc`` and then ``id`` first; anything else is not taken for an id.
_LEADING_ID = re.compile(
    rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*,')


class RpcFailure(Exception):
    """The daemon answered a request with a JSON-RPC error."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error
        self.code = error.code
        self.data_code = error.data.code if error.data is not None else None


class DaemonClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 *, max_frame_bytes: int = 64 << 20, queue: int = 10_000,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.reader = reader
        self.writer = writer
        self.timeout = timeout  # seconds a call waits by default; None: no limit
        self.server: t.InitializeResult | None = None  # the daemon's initialize answer
        self.notifications: asyncio.Queue[Notification] = asyncio.Queue(maxsize=queue)
        self._served: dict[str, _Served] = {}
        # Errors the daemon could not tie to a request (a malformed or oversized frame).
        self.stray_errors: asyncio.Queue[RpcError] = asyncio.Queue(maxsize=queue)
        self._ids = itertools.count(1)
        self._serving: set[asyncio.Task[None]] = set()
        self._waiting: dict[int | str, asyncio.Future[Any]] = {}
        # The method and frame size (without its newline) of each request in flight.
        self._sent: dict[int | str, tuple[str, int]] = {}
        self._splitter = FrameSplitter(max_frame_bytes)
        self._reading = asyncio.create_task(self._read(), name="client reader")
        self._token: str | None = None

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

    def serve(self, method: Method[P, R], handler: Callable[[P], Awaitable[R]]) -> None:
        """Answer the server request ``method`` (a plugin's tool gate) with ``handler``: its
        params arrive decoded; one that does not decode is answered with an error."""
        if method.name not in SERVER_REQUESTS:
            raise ValueError(f"{method.name} is not a server request; see SERVER_REQUESTS")

        async def decoded(raw: Any) -> msgspec.Struct:
            return await handler(msgspec.convert(raw, method.params))

        self._served[method.name] = decoded

    async def call_raw(self, method: str, params: Any = None, *,
                       timeout: float | None = None) -> Any:
        """One request of any method name with any params, its answer undecoded JSON data:
        for tests that send unknown methods or malformed params on purpose (use ``request``
        for everything else)."""
        (outcome,) = await self.call_many_raw([(method, {} if params is None else params)],
                                              timeout=timeout)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def call_many_raw(self, calls: list[tuple[str, Any]], *,
                            timeout: float | None = None) -> list[Any]:
        """``call_raw`` pipelined: every request in one write, then every answer, in order
        (a result, or the error it failed with)."""
        return await self._exchange(calls, timeout) if calls else []

    async def _exchange(self, calls: list[tuple[str, Any]],
                        timeout: float | None) -> list[Any]:
        if self._reading.done():  # no answer could ever be read
            raise ConnectionError("the daemon closed the connection")
        loop = asyncio.get_running_loop()
        limit = self._daemon_limit()
        ids, answers, frames = [], [], []
        for method, params in calls:
            id, answer = next(self._ids), loop.create_future()
            frame = encode_request(id, method, params)
            ids.append(id)
            answers.append(answer)
            if limit is not None and len(frame) - 1 > limit:  # it would be dropped unread
                answer.set_exception(_request_too_large(method, len(frame) - 1, limit))
                continue
            self._waiting[id], self._sent[id] = answer, (method, len(frame) - 1)
            frames.append(frame)
        seconds = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(seconds):
                if frames:
                    await self.send_raw(b"".join(frames))
                await asyncio.wait(answers)
        except TimeoutError:
            for id, answer in zip(ids, answers, strict=True):
                if not answer.done():
                    answer.set_exception(_timed_out(self._sent[id][0], seconds))
        finally:
            for id in ids:
                self._waiting.pop(id, None)
                self._sent.pop(id, None)
        return [answer.exception() or answer.result() for answer in answers]

    def _daemon_limit(self) -> int | None:
        """The daemon's frame limit, as its ``initialize`` answer stated it."""
        return self.server.capabilities.max_frame_bytes if self.server is not None else None

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

    async def send_raw(self, frame: bytes) -> None:
        """Write bytes as they are (tests send malformed frames with it)."""
        self.writer.write(frame)
        await self.writer.drain()

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
                    return msgspec.convert(note.params, method.params)

    async def _notification(self) -> Notification:
        while True:
            if self.notifications.empty() and self._reading.done():
                raise ConnectionError("the daemon closed the connection")
            taking = asyncio.ensure_future(self.notifications.get())
            try:
                await asyncio.wait((taking, self._reading),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not taking.done():  # a cancelled get takes nothing off the queue
                    taking.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await taking
            if not taking.cancelled():
                return taking.result()

    async def close(self) -> None:
        self._reading.cancel()
        await asyncio.gather(self._reading, return_exceptions=True)
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.writer.close()
            await self.writer.wait_closed()

    async def _read(self) -> None:
        try:
            while chunk := await self.reader.read(1 << 16):
                for frame in self._splitter.feed(chunk):
                    await self._frame(frame)
        except ConnectionError:
            pass
        finally:
            for answer in self._waiting.values():
                if not answer.done():
                    answer.set_exception(ConnectionError("the daemon closed the connection"))

    async def _frame(self, frame: bytes | Oversized) -> None:
        if isinstance(frame, Oversized):
            self._oversized(frame)
            return
        message = decode_frame(frame)
        if isinstance(message, Reply | Failure):
            self._answer(message)
        elif isinstance(message, Notification):
            await self.notifications.put(message)
        else:
            task = asyncio.create_task(self._serve(message), name=f"serve {message.method}")
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    def _answer(self, message: Reply | Failure) -> None:
        if message.id is None:
            # An error without an id answers a frame the server could not read.
            assert isinstance(message, Failure)
            if not self._dropped_unread(message.error):
                with contextlib.suppress(asyncio.QueueFull):
                    self.stray_errors.put_nowait(message.error)
            return
        answer = self._waiting.get(message.id)
        if answer is None or answer.done():
            if message.error is not None:  # an answer to a frame sent raw
                with contextlib.suppress(asyncio.QueueFull):
                    self.stray_errors.put_nowait(message.error)
            return
        if message.error is not None:
            answer.set_exception(RpcFailure(message.error))
        elif isinstance(message, Reply):
            answer.set_result(message.result)

    def _dropped_unread(self, error: RpcError) -> bool:
        """The daemon dropped frames over its limit unread (an id-null error naming that
        limit): fail every call in flight whose frame was over it, since none will ever be
        answered. True if it failed one (else it answers a frame sent raw: a stray)."""
        details = error.data.details if error.data is not None else {}
        limit = details.get("limit")
        if error.data is None or error.data.code != FrameTooLarge.code or not isinstance(
                limit, int):
            return False
        failed = False
        for id, (method, size) in self._sent.items():
            answer = self._waiting.get(id)
            if size > limit and answer is not None and not answer.done():
                answer.set_exception(_request_too_large(method, size, limit))
                failed = True
        return failed

    def _oversized(self, frame: Oversized) -> None:
        """A line over this client's limit was dropped: fail the call it answered."""
        found = _LEADING_ID.match(frame.head)
        id = json.loads(found.group(1)) if found else None
        if not isinstance(id, int | str) or (answer := self._waiting.get(id)) is None or (
                answer.done()):
            return  # a notification, or an answer nobody waits for: nothing to fail
        method = self._sent[id][0]
        limit = self._splitter.limit
        answer.set_exception(AnswerTooLarge(
            f"the answer to {method} was {frame.size} bytes, over this client's limit of "
            f"{limit} bytes, and was dropped; the call may have taken effect: ask for less "
            "(a smaller page), or connect with a larger max_frame_bytes",
            method=method, size=frame.size, limit=limit))

    async def _serve(self, request: Request) -> None:
        handler = self._served.get(request.method)
        if handler is None:
            reply = encode_error(request.id, rpc_error(UnknownMethod(
                f"this client serves no {request.method}", method=request.method)))
        else:
            try:
                reply = encode_result(request.id, await handler(request.params))
            except Exception as exc:
                reply = encode_error(request.id, rpc_error(InternalError(
                    f"{request.method} failed in the client ({type(exc).__name__}: {exc})",
                    method=request.method)))
        with contextlib.suppress(ConnectionError):
            await self.send_raw(reply)


def _decoded(method: Method[Any, R], answer: Any) -> R:
    try:
        return msgspec.convert(answer, method.result)
    except msgspec.ValidationError as exc:
        raise AnswerMalformed(
            f"the answer to {method.name} is not a {method.result.__name__} ({exc}); the "
            "call may have taken effect: read the state back, and check that the daemon "
            f"speaks protocol {PROTOCOL_VERSION}", method=method.name) from None


def _owner(failure: RpcFailure) -> str | None:
    """Where a ``daemon:not_owner`` answer says to go; None for any other failure."""
    data = failure.error.data
    if data is None or data.code != NotOwner.code:
        return None
    owner = data.details.get("owner")
    return owner if isinstance(owner, str) and owner else None



def _request_too_large(method: str, size: int, limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"the request to {method} is a frame of {size} bytes, over the daemon's limit of "
        f"{limit} bytes; nothing was done: send less in one request", method=method,
        size=size, limit=limit)


def _timed_out(method: str, seconds: float | None) -> ClientTimeout:
    return ClientTimeout(
        f"no answer to {method} within {seconds:g}s: the daemon may be stopped, hung or "
        "overloaded, and the call may or may not have taken effect; check the daemon, then "
        "retry (or allow more time)", method=method, timeout=seconds)


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
