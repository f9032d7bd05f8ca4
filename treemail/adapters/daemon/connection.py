"""One client connection: its frames in, a bounded queue of frames out, its requests in
flight, and the requests the server made of it (a plugin's gate answers).

Nothing grows without bound. What the connection makes the daemon hold is counted in bytes
against its budget (``budget.py``): over it, the connection's frames are no longer read,
which pushes back on the client through the socket, and its subscriptions stop sending.
Outgoing frames also wait in a queue of at most ``out_frames``. Requests in flight are capped
at ``max_in_flight``; one more is answered at once with an overload error. Of those, at most
``max_running`` build their answers at once. Every server -> client request (a plugin's gate)
is bounded by ``peer_timeout`` as a whole: waiting for room to send it counts too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs
import msgspec

from treemail.adapters.daemon.budget import Budget, Closed
from treemail.adapters.daemon.handshake import Handshake
from treemail.adapters.daemon.tcp import AUTH_BYTES, AUTH_TIMEOUT, MAX_UNAUTHENTICATED
from treemail.core.errors import ConfigError
from treemail.protocol.jsonrpc import RpcError, encode_request
from treemail.protocol.methods import Method
from treemail.protocol.types import ClientCapabilities

__all__ = ["Connection", "Limits", "PeerGone"]

P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)


@attrs.frozen
class Limits:
    """Per connection. The config's ``[daemon.limits]`` table overrides any of them."""

    max_frame_bytes: int = 1 << 20
    max_in_flight: int = 64
    out_frames: int = 256
    read_chunk: int = 1 << 16
    peer_timeout: float = 30.0  # how long a server->client request may take, send included
    auth_timeout: float = AUTH_TIMEOUT  # how long a TCP peer has to prove it holds the token
    auth_bytes: int = AUTH_BYTES  # what it may send until then
    max_unauthenticated: int = MAX_UNAUTHENTICATED  # TCP peers proving themselves at once
    # The byte budget (budget.py). The most one connection holds the daemon to is about
    # max_held_bytes + max_running x its largest answer.
    max_held_bytes: int = 16 << 20
    max_running: int = 4  # requests of a connection building their answers at once
    max_subscriptions: int = 1024  # events.subscribe per connection

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], where: str = "[daemon.limits]") -> Limits:
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table of limits, not {table!r}")
        fields = {f.name: f for f in attrs.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in table.items():
            if name not in fields:
                raise ConfigError(f"{where}: no limit {name!r}; the limits are "
                                  f"{', '.join(fields)}")
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{where}: {name} must be a number > 0, not {value!r}")
            if fields[name].type in (int, "int") and not isinstance(value, int):
                raise ConfigError(f"{where}: {name} must be a whole number, not {value!r}")
            values[name] = value
        return cls(**values)


class PeerGone(Exception):
    """The connection closed, or did not answer a server request in time."""


class Connection:
    def __init__(self, writer: asyncio.StreamWriter, limits: Limits, name: str,
                 handshake: Handshake | None = None) -> None:
        self.writer = writer
        self.limits = limits
        self.name = name
        self.handshake = handshake  # set on TCP: it proves itself first (see handshake.py)
        self.authenticated = handshake is None
        self.hung_up = False
        self.initialized = False
        self.capabilities = ClientCapabilities()
        self.in_flight = 0
        self.asking_stop = 0  # of those, ``shutdown`` requests (the stop does not wait on them)
        self.subscriptions = 0
        self.budget = Budget(limits.max_held_bytes)
        self.running = asyncio.Semaphore(limits.max_running)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.requests: set[asyncio.Task[Any]] = set()
        self.closed = False
        self._out: asyncio.Queue[bytes] = asyncio.Queue(maxsize=limits.out_frames)
        self._ids = itertools.count(1)
        self._asked: dict[int | str, asyncio.Future[Any]] = {}
        self._pump = asyncio.create_task(self._write_out(), name=f"out {name}")

    async def send(self, frame: bytes) -> None:
        """Queue a frame; waits while the budget or the queue is full (the client is not
        reading)."""
        if self.closed or self.hung_up:
            raise PeerGone(f"connection {self.name} is closed")
        try:
            await self.budget.room(len(frame))
        except Closed:
            raise PeerGone(f"connection {self.name} is closed") from None
        await self.answer(frame)

    async def answer(self, frame: bytes) -> None:
        """Queue a frame already built (an answer): counted at once, it never waits for
        byte room (its bytes are spent), only for a place in the queue."""
        if self.closed or self.hung_up:
            raise PeerGone(f"connection {self.name} is closed")
        self.budget.take(len(frame))
        try:
            await self._out.put(frame)
        except BaseException:
            self.budget.give(len(frame))
            raise

    async def room(self) -> None:
        """Wait until the connection holds less than its budget (``PeerGone`` if it
        closes meanwhile): the reader's wait before it starts another request."""
        try:
            await self.budget.room()
        except Closed:
            raise PeerGone(f"connection {self.name} is closed") from None

    @property
    def buffered(self) -> tuple[int, int]:
        """What waits to go out: frames in the queue, and bytes in the socket's buffer (the
        writer waits once that passes its high-water mark)."""
        return self._out.qsize(), self.writer.transport.get_write_buffer_size()

    async def hang_up(self, last: bytes) -> None:
        """Send ``last``, then close the socket: nothing more is read or sent."""
        await self.send(last)
        self.hung_up = True
        await self._out.put(b"")  # the pump closes the socket when it reaches this

    async def ask(self, method: Method[P, R], params: P) -> R:
        """A server -> client request (one of ``SERVER_REQUESTS``); its result decoded, or
        ``PeerGone`` raised, or ``msgspec.ValidationError`` for an answer of another shape."""
        return msgspec.convert(await self._ask(method.name, params), method.result)

    async def _ask(self, method: str, params: object) -> Any:
        id = f"s{next(self._ids)}"
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._asked[id] = answer
        try:
            # The wait for room to send is a wait on the peer as much as its answer is: a
            # gate that stopped reading must fail in time, not stall every tool call.
            async with asyncio.timeout(self.limits.peer_timeout):
                await self.send(encode_request(id, method, params))
                return await answer
        except TimeoutError:
            raise PeerGone(f"{self.name} did not answer {method} within "
                           f"{self.limits.peer_timeout}s") from None
        finally:
            self._asked.pop(id, None)

    def answered(self, id: int | str, result: Any, error: RpcError | None) -> None:
        answer = self._asked.get(id)
        if answer is None or answer.done():
            return  # late or unknown: the asker gave up, nothing waits for it
        if error is not None:
            answer.set_exception(PeerGone(f"{self.name} answered with error {error.code}: "
                                          f"{error.message}"))
        else:
            answer.set_result(result)

    def spawn(self, coroutine: Any, name: str, *, request: bool = False) -> asyncio.Task[Any]:
        """Run a task of this connection; ``request`` marks an answer still owed."""
        task = asyncio.create_task(coroutine, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if request:
            self.requests.add(task)
            task.add_done_callback(self.requests.discard)
        return task

    async def settle(self, timeout: float) -> None:
        """The client stopped sending: let the answers it is owed go out first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.gather(*self.requests, return_exceptions=True)

    async def _write_out(self) -> None:
        while True:
            frame = await self._out.get()
            if not frame:
                self.writer.close()
                return
            try:
                self.writer.write(frame)
                await self.writer.drain()
            finally:
                self.budget.give(len(frame))  # the socket took it (or never will)

    async def close(self, flush: float = 1.0) -> None:
        """Stop its tasks, send what is queued (for at most ``flush`` seconds), close."""
        if self.closed:
            return
        self.closed = True
        self.budget.close()
        for answer in self._asked.values():
            if not answer.done():
                answer.set_exception(PeerGone(f"connection {self.name} closed"))
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(flush):
                while not self._out.empty() and not self._pump.done():
                    await asyncio.sleep(0.005)
        self._pump.cancel()
        await asyncio.gather(self._pump, return_exceptions=True)
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.writer.close()
