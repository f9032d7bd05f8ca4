"""The daemon: one process owns every session of a data directory, served as JSON-RPC 2.0.

Frames come in through ``FrameSplitter`` (a size limit), are decoded by the pure protocol
layer, and each request runs as its own task, capped per connection in number and in the
bytes it makes the daemon hold (``budget.py``): over its budget, a connection is not read.
The order of shutdown (SIGTERM or the ``shutdown`` method): stop accepting connections,
refuse new requests with ``send_message:engine_shutdown``, let the requests in flight
finish, shut the runtime down (runs stop at a boundary; claimed mail released), close the
connections, unlink the socket, close the store (which drops the data directory's one
lock, see ``lock.py``).

On TCP a connection is a stranger until it proves it holds the token (``handshake.py``):
until then it has ``auth_timeout`` seconds and ``auth_bytes`` bytes, and at most
``max_unauthenticated`` such connections are served; one more is refused as it is accepted,
before anything is read or allocated for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec

from treemail.adapters.daemon.connection import Connection, Limits, PeerGone
from treemail.adapters.daemon.feeds import Subscriptions
from treemail.adapters.daemon.handshake import Handshake, Stage
from treemail.adapters.daemon.listener import Listener, UnixSocket, bind_tcp, bind_unix
from treemail.adapters.daemon.registered import Registered
from treemail.adapters.daemon.routes import Handler
from treemail.adapters.daemon.tcp import Token, loopback
from treemail.adapters.runtime.agent_docs import ModelFor
from treemail.adapters.runtime.runtime import Runtime
from treemail.core.errors import EngineShutdown, TreemailError
from treemail.core.store import Store
from treemail.protocol.errors import RpcError, rpc_error
from treemail.protocol.framing import FrameSplitter, Oversized
from treemail.protocol.jsonrpc import (
    Failure,
    Incoming,
    Notification,
    Reply,
    Request,
    decode_frame,
    encode_error,
    encode_result,
)
from treemail.protocol.methods import (
    INITIALIZE,
    METHODS,
    SHUTDOWN,
    Method,
    ParamsError,
    decode_params,
)
from treemail.protocol.rpc_errors import (
    AnswerFailed,
    FrameTooLarge,
    InternalError,
    InvalidParams,
    NotInitialized,
    Overloaded,
    UnknownMethod,
)

__all__ = ["Daemon"]

# Methods that still answer while the daemon stops; every other one is refused.
_WHILE_STOPPING = frozenset({INITIALIZE.name, SHUTDOWN.name})


class SessionGate(Protocol):
    """What the server asks of the external sessions' bindings (``external.External``),
    declared here so that the server needs nothing of that module."""

    def gate(self, conn: Connection, method: str) -> None:
        """Raise if ``conn`` may not call ``method`` (a bound connection, out of scope)."""

    async def closed(self, conn: Connection) -> None:
        """``conn`` ended: release what it held."""

    def session_of(self, conn: Connection) -> str | None:
        """The session a bound connection acts as; None for a connection not bound."""


class Daemon:
    def __init__(self, runtime: Runtime, store: Store, model_for: ModelFor,
                 subscriptions: Subscriptions, limits: Limits | None = None) -> None:
        self.runtime = runtime
        self.subscriptions = subscriptions
        self.model_for = model_for
        self.store = store
        self.limits = limits or Limits()
        # Where agent docs defined over the wire are kept (registered.py); None: in memory.
        self.registered: Registered | None = None
        self.handlers: dict[str, Handler] = {}
        # External sessions' bindings (external.py): asked before each dispatch, told of
        # each connection's end. None until the handlers are installed.
        self.external: SessionGate | None = None
        self.connections: set[Connection] = set()
        self.stopping = False
        self.stopped = asyncio.Event()
        self._listeners: list[Listener] = []
        self._serving: set[asyncio.Task[None]] = set()  # each accepted connection's task
        self._opening = 0  # TCP connections accepted, not yet in ``connections``
        self._names = iter(range(1, 1 << 62))
        self._stop_task: asyncio.Task[None] | None = None
        self._socket: UnixSocket | None = None
        self.tcp: str | None = None  # HOST:PORT of the TCP listener, when there is one
        # Run once the runtime stopped writing: a daemon sharing its store gives its trees
        # up there (``ownership.py``).
        self.give_up: Callable[[], Awaitable[None]] | None = None

    # -- listening -----------------------------------------------------------------------

    async def listen_unix(self, path: Path) -> None:
        """The Unix socket at ``path``, which must not hold a file or a live socket
        (``listener.py``); only its user can open it."""
        self._socket = bind_unix(path)
        self._listeners.append(Listener(
            self._socket.sock, lambda sock: self._open(sock, None), str(path)))

    async def serve_stdio(self) -> None:
        """One connection over stdin/stdout; the daemon stops when stdin closes."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self.serve(reader, writer)
        self.request_stop()

    # -- one connection --------------------------------------------------------------------

    async def listen_tcp(self, host: str, port: int, token: Token) -> str:
        """A TCP listener on a loopback address; each connection must prove it holds
        ``token`` (see ``handshake.py``). Returns the address bound, ``HOST:PORT`` (port 0
        picks one)."""
        socks = bind_tcp(loopback(host, port), port)
        bound = socks[0].getsockname()
        where = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
        for sock in socks:
            self._listeners.append(Listener(sock, lambda s: self._open(s, token), where))
        return where

    def _open(self, sock: socket.socket, token: Token | None) -> None:
        """Serve a connection just accepted; on TCP, refuse it at once when
        ``max_unauthenticated`` connections are still to prove themselves."""
        if token is not None and self._unauthenticated() >= self.limits.max_unauthenticated:
            _turn_away(sock, self.limits.max_unauthenticated)
            return
        self._opening += token is not None
        task = asyncio.get_running_loop().create_task(self._serve_socket(sock, token))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    def _unauthenticated(self) -> int:
        return self._opening + sum(1 for c in self.connections if not c.authenticated)

    async def _serve_socket(self, sock: socket.socket, token: Token | None) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock)
        except OSError:
            sock.close()
            return
        finally:
            self._opening -= token is not None
        # ``serve`` puts the connection in ``connections`` before it first waits, so the
        # count of connections still proving themselves has no gap.
        await self.serve(reader, writer, token)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    token: Token | None = None) -> None:
        handshake = Handshake(token) if token is not None else None
        conn = Connection(writer, self.limits, f"c{next(self._names)}", handshake)
        self.connections.add(conn)
        splitter = FrameSplitter(self.limits.max_frame_bytes)
        deadline = asyncio.get_running_loop().time() + self.limits.auth_timeout
        try:
            while not (conn.closed or conn.hung_up):
                chunk = await self._read(conn, reader, deadline)
                frames = splitter.feed(chunk) if chunk else splitter.end()
                for frame in frames:
                    if not conn.hung_up:
                        await self._frame(conn, frame)
                if not chunk:
                    await conn.settle(self.limits.peer_timeout)
                    break
        except (ConnectionError, PeerGone):
            pass
        finally:
            self.connections.discard(conn)
            await conn.close()
            if self.external is not None:
                await self.external.closed(conn)

    async def _read(self, conn: Connection, reader: asyncio.StreamReader,
                    deadline: float) -> bytes:
        if conn.handshake is None or conn.authenticated:
            return await reader.read(self.limits.read_chunk)
        # One byte more than the budget's rest: a read that gets it has overrun the budget.
        room = self.limits.auth_bytes - conn.handshake.received
        try:
            async with asyncio.timeout_at(deadline):
                chunk = await reader.read(room + 1)
        except TimeoutError:
            await conn.hang_up(conn.handshake.refuse(
                f"no handshake within {self.limits.auth_timeout:g}s"))
            return b""
        conn.handshake.received += len(chunk)
        if len(chunk) > room:
            await conn.hang_up(conn.handshake.refuse(
                f"more than {self.limits.auth_bytes} bytes before authentication"))
            return b""
        return chunk

    async def _admit(self, conn: Connection, message: Incoming | Oversized) -> None:
        """A frame of a TCP connection still proving itself (``handshake.py``)."""
        assert conn.handshake is not None
        step = conn.handshake.receive(message)
        if step.stage is Stage.REFUSED:
            await conn.hang_up(step.answer)
            return
        conn.authenticated = step.stage is Stage.PROVED
        await conn.send(step.answer)

    async def _frame(self, conn: Connection, frame: bytes | Oversized) -> None:
        message = frame if isinstance(frame, Oversized) else decode_frame(frame)
        if not conn.authenticated:
            await self._admit(conn, message)
        elif isinstance(message, Oversized):
            await conn.send(encode_error(None, rpc_error(FrameTooLarge(
                f"frame of {message.size} bytes is over the limit of "
                f"{self.limits.max_frame_bytes} bytes; it was dropped unread",
                size=message.size, limit=self.limits.max_frame_bytes))))
        elif isinstance(message, Failure):
            await conn.send(encode_error(message.id, message.error))
        elif isinstance(message, Reply):
            conn.answered(message.id, message.result, message.error)
        else:  # a request, or a notification: executed too, but never answered
            await conn.room()  # over its byte budget, the peer waits: see budget.py
            await self._request(conn, message, len(frame) if isinstance(frame, bytes) else 0)

    async def _request(self, conn: Connection, call: Request | Notification, size: int) -> None:
        if conn.in_flight >= self.limits.max_in_flight:
            limit = self.limits.max_in_flight
            # A notification over the cap is not run, and must not vanish unseen: it is the
            # one notification the daemon answers, with a null id (it has no other).
            id = call.id if isinstance(call, Request) else None
            await conn.send(encode_error(id, rpc_error(Overloaded(
                f"{limit} requests are already in flight on this connection; "
                f"{call.method} was not run; wait for answers before sending more",
                limit=limit, method=call.method))))
            return
        conn.in_flight += 1
        conn.budget.take(size)  # the request frame is held until its answer is built
        # Marked as owed, notifications too: a client that sends one and hangs up still has
        # it run to its end (the connection settles them before closing).
        conn.spawn(self._answer(conn, call, size), f"{conn.name} {call.method}", request=True)

    async def _answer(self, conn: Connection, call: Request | Notification, size: int) -> None:
        frame: bytes | None = None
        # Counted apart, so the ordered stop does not wait for the request that asked for it.
        asks_stop = call.method == SHUTDOWN.name
        conn.asking_stop += asks_stop
        try:
            # An answer's size is known only once it is built: so few are built at once,
            # and none starts while the connection is over its budget. A notification has
            # no answer to hold, so it does not wait for room (and runs after a hang-up).
            async with conn.running:
                if isinstance(call, Request):
                    await conn.room()
                answer = await self._outcome(conn, call)
                if isinstance(call, Request):
                    frame = _encoded(call, answer)
        except PeerGone:
            return  # it closed while the request waited for room: no one to answer
        finally:
            conn.in_flight -= 1
            conn.asking_stop -= asks_stop
            conn.budget.give(size)
        # A notification's outcome, result or error, is not sent: JSON-RPC forbids answering
        # one, and a client that needs to know sends a request. Nor is it logged: a peer
        # must not be able to fill the daemon's stderr, which may be a pipe nobody reads.
        if frame is not None:
            with contextlib.suppress(PeerGone):
                await conn.answer(frame)

    async def _outcome(self, conn: Connection,
                       call: Request | Notification) -> msgspec.Struct | RpcError:
        try:
            return await self._dispatch(conn, call)
        except TreemailError as error:
            return rpc_error(error)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            print(f"treemail daemon: {call.method} failed: {exc!r}", file=sys.stderr)
            return rpc_error(InternalError(
                f"{call.method} failed inside the daemon ({type(exc).__name__}: {exc}); "
                "this is a bug, please report it", method=call.method))

    async def _dispatch(self, conn: Connection,
                        request: Request | Notification) -> msgspec.Struct:
        method = METHODS.get(request.method)
        handler = self.handlers.get(request.method)
        if method is None or handler is None:
            raise UnknownMethod(f"no method {request.method!r}; see spec/bindings for the "
                                "methods of this protocol", method=request.method)
        if not conn.initialized and method is not INITIALIZE:
            raise NotInitialized(f"{method.name} before initialize: send initialize first",
                                 method=method.name)
        if self.external is not None:
            self.external.gate(conn, method.name)
        params = _params(method, request.params)
        if self.stopping and method.name not in _WHILE_STOPPING:
            raise EngineShutdown("the daemon is shutting down; nothing was accepted; "
                                 "retry after it restarts")
        return await handler(conn, params)

    # -- stopping --------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin the ordered shutdown (idempotent); ``stopped`` is set when it is done."""
        if self._stop_task is None:
            self.stopping = True
            # stderr may be a pipe nobody reads any more: a stop must not fail on its log line.
            with contextlib.suppress(OSError):
                print("treemail daemon: stopping", file=sys.stderr, flush=True)
            self._stop_task = asyncio.get_running_loop().create_task(self._stop())

    async def _stop(self) -> None:
        for listener in self._listeners:
            listener.close()
        await self._drain_requests(timeout=self.runtime.shutdown_grace)
        await self.runtime.shutdown()
        if self.give_up is not None:
            await self.give_up()
        await asyncio.gather(*(c.close() for c in list(self.connections)),
                             return_exceptions=True)
        if self._socket is not None:  # before the lock goes: a next daemon's socket stays
            self._socket.release()  # only if the path still names the socket bound here
        self.store.close()  # drops the data directory's one lock (lock.py)
        self.stopped.set()

    async def _drain_requests(self, timeout: float) -> None:
        # The shutdown requests themselves are in flight: each answers right after asking.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while any(c.in_flight > c.asking_stop for c in self.connections):
                    await asyncio.sleep(0.01)


def _turn_away(sock: socket.socket, limit: int) -> None:
    """Refuse a connection for the cost of one small write: no task, no buffers. What it
    already sent is read and dropped first, so closing does not reset the connection before
    it reads why."""
    error = encode_error(None, rpc_error(Overloaded(
        f"{limit} TCP connections are already waiting to authenticate; retry in a moment",
        limit=limit)))
    with contextlib.suppress(OSError):
        sock.recv(4096)
    with contextlib.suppress(OSError):
        sock.send(error)
    sock.close()


def _params(method: Method[Any, Any], raw: Any) -> msgspec.Struct:
    try:
        params: msgspec.Struct = decode_params(method, raw)
        return params
    except ParamsError as exc:
        raise InvalidParams(f"{method.name}: {exc}", method=method.name) from None


def _encoded(request: Request, answer: msgspec.Struct | RpcError) -> bytes:
    """The answer's frame; an answer that cannot be encoded (MemoryError included) is still
    answered, with an error that says the request was carried out."""
    if isinstance(answer, RpcError):
        return encode_error(request.id, answer)
    try:
        return encode_result(request.id, answer)
    except Exception as exc:
        print(f"treemail daemon: answer to {request.method} not encoded: {exc!r}",
              file=sys.stderr)
        return encode_error(request.id, rpc_error(AnswerFailed(
            f"{request.method} was carried out but its answer could not be encoded "
            f"({type(exc).__name__}); read the state back before retrying, and ask for "
            "less at once (a smaller limit or page) if the answer was large",
            method=request.method, reason=type(exc).__name__)))
