"""The client's side of one connection to the daemon: frames written, answers matched to the
requests they answer, notifications queued, server requests served, and every way an answer
can fail to come (``RpcFailure``, and the ``ClientFailure``s the client raises itself).

``Channel`` speaks JSON-RPC with any method name and any params (``call_raw``); the typed
``DaemonClient`` (``client.py``) builds the protocol's methods on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from treemail.adapters.daemon.errors import AnswerTooLarge, ClientTimeout, RequestTooLarge
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
from treemail.protocol.methods import SERVER_REQUESTS, Method
from treemail.protocol.rpc_errors import FrameTooLarge, InternalError, UnknownMethod

__all__ = ["DEFAULT_TIMEOUT", "Channel", "RpcFailure"]

# How long a call waits for its answer by default: longer than the daemon's own longest wait
# inside a call (a plugin's tool gate, 30 s), so a slow gate is not taken for a dead daemon.
DEFAULT_TIMEOUT = 60.0

P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)
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


class Channel:
    """One connection's frames: requests out and their answers back, in any order."""

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

    async def send_raw(self, frame: bytes) -> None:
        """Write bytes as they are (tests send malformed frames with it)."""
        self.writer.write(frame)
        await self.writer.drain()

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


