"""The async client of protocol 19, used by the CLI and the tests.

``DaemonClient.connect`` opens the Unix socket (or ``tcp://HOST:PORT``, where both sides
prove they hold the daemon's token without sending it: ``handshake.py``) and performs the
``initialize`` handshake.
``call`` sends a request and returns its result as plain JSON data (or decoded into a wire
type with ``call_as``); an error answer raises ``RpcFailure``, whose ``data_code`` is
treemail's stable code. Notifications land in a bounded queue (``notifications``); a server
request (a plugin's tool gate) goes to ``on_request``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from treemail.adapters.daemon.tcp import AUTH_TIMEOUT, NONCE_BYTES, Token, parse_address
from treemail.core.errors import InternalError, ServerUnproven, UnknownMethod
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
from treemail.protocol.methods import PROTOCOL_VERSION

__all__ = ["DaemonClient", "RpcFailure"]

S = TypeVar("S", bound=msgspec.Struct)
OnRequest = Callable[[str, Any], Awaitable[Any]]


class RpcFailure(Exception):
    """The daemon answered a request with a JSON-RPC error."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error
        self.code = error.code
        self.data_code = error.data.code if error.data is not None else None


class DaemonClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 *, max_frame_bytes: int = 64 << 20, queue: int = 10_000) -> None:
        self.reader = reader
        self.writer = writer
        self.server: dict[str, Any] = {}
        self.notifications: asyncio.Queue[Notification] = asyncio.Queue(maxsize=queue)
        self.on_request: OnRequest | None = None
        # Errors the daemon could not tie to a request (a malformed or oversized frame).
        self.stray_errors: asyncio.Queue[RpcError] = asyncio.Queue(maxsize=queue)
        self._ids = itertools.count(1)
        self._serving: set[asyncio.Task[None]] = set()
        self._waiting: dict[int | str, asyncio.Future[Any]] = {}
        self._splitter = FrameSplitter(max_frame_bytes)
        self._reading = asyncio.create_task(self._read(), name="client reader")

    @classmethod
    async def connect(cls, socket: str | Path, *, name: str = "treemail-client",
                      initialize: bool = True, token: str | None = None,
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
        client = cls(reader, writer)
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

    async def authenticate(self, token: Token, address: str = "the TCP listener",
                           timeout: float = AUTH_TIMEOUT) -> None:
        """The TCP handshake, client side: the server proves it holds ``token``, and only
        then does the client prove it too. Until the server's proof checks out the client has
        sent a random nonce and nothing else (spec/protocol.md, section 2)."""
        client_nonce = secrets.token_bytes(NONCE_BYTES)
        try:
            async with asyncio.timeout(timeout):
                answer = await self.call("auth.challenge", {"client_nonce": client_nonce.hex()})
        except TimeoutError:
            raise _unproven(address, f"it did not answer within {timeout:g}s") from None
        except ConnectionError:
            raise _unproven(address, "it closed the connection") from None
        server_nonce, proof = _challenge_answer(answer)
        if server_nonce is None or not Token.matches(
                token.server_proof(client_nonce, server_nonce), proof):
            raise _unproven(address, "its server_proof is not an HMAC under your token")
        async with asyncio.timeout(timeout):
            await self.call("auth.prove", {
                "client_proof": token.client_proof(server_nonce, client_nonce).hex()})

    async def initialize(self, name: str, version: int = PROTOCOL_VERSION,
                         **capabilities: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"protocol_version": version, "client_info": {"name": name},
                                  "capabilities": capabilities}
        result: dict[str, Any] = await self.call("initialize", params)
        return result

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        if self._reading.done():  # no answer could ever be read
            raise ConnectionError("the daemon closed the connection")
        id = next(self._ids)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[id] = answer
        try:
            await self.send_raw(encode_request(id, method, params or {}))
            return await answer
        finally:
            self._waiting.pop(id, None)

    async def call_many(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        """Pipelined: every request in one write, then every answer, in order (a result, or
        the ``RpcFailure`` it was answered with)."""
        ids = [next(self._ids) for _ in calls]
        loop = asyncio.get_running_loop()
        answers = [self._waiting.setdefault(id, loop.create_future()) for id in ids]
        try:
            await self.send_raw(b"".join(encode_request(id, method, params)
                                         for id, (method, params) in zip(ids, calls, strict=True)))
            return list(await asyncio.gather(*answers, return_exceptions=True))
        finally:
            for id in ids:
                self._waiting.pop(id, None)

    async def call_as(self, result: type[S], method: str,
                      params: dict[str, Any] | None = None) -> S:
        return msgspec.convert(await self.call(method, params), result)

    async def send_raw(self, frame: bytes) -> None:
        """Write bytes as they are (tests send malformed frames with it)."""
        self.writer.write(frame)
        await self.writer.drain()

    async def next_notification(self, method: str | None = None,
                                timeout: float | None = 10.0) -> Notification:
        """The next notification (of ``method``), waiting up to ``timeout`` seconds (None:
        no limit); ``ConnectionError`` once the connection is closed and every notification
        it brought has been taken, so a watcher never waits on a daemon that is gone."""
        async with asyncio.timeout(timeout):
            while True:
                note = await self._notification()
                if method is None or note.method == method:
                    return note

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

    async def _serve(self, request: Request) -> None:
        if self.on_request is None:
            reply = encode_error(request.id, rpc_error(UnknownMethod(
                f"this client serves no {request.method}", method=request.method)))
        else:
            try:
                reply = encode_result(request.id, await self.on_request(request.method,
                                                                        request.params))
            except Exception as exc:
                reply = encode_error(request.id, rpc_error(InternalError(
                    f"{request.method} failed in the client ({type(exc).__name__}: {exc})",
                    method=request.method)))
        with contextlib.suppress(ConnectionError):
            await self.send_raw(reply)


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
