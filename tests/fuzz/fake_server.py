"""A local chat-completions server that answers each request by a plan: hostile JSON, bodies
cut short, wrong content types, 5xx with odd Retry-After values, slow answers, or a closed
connection; or a stream of Server-Sent Events that ends, breaks off, sends garbage, never
ends, or stalls. stdlib ``http.server`` in a thread; plans are taken in order, then it
answers a plain valid reply."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

__all__ = ["FakeServer", "Plan", "serving", "sse", "streamed"]

DONE = json.dumps({"choices": [{"message": {"role": "assistant", "content": "done"}}]}).encode()


@attrs.frozen
class Plan:
    status: int = 200
    body: bytes = DONE
    content_type: str | None = "application/json"
    retry_after: str | None = None
    delay: float = 0.0
    # normal: the whole body; truncate: a Content-Length longer than what is sent, then the
    # connection closes; close: the connection closes before any answer.
    # stream: ``chunks`` sent one by one in chunked encoding, then its end; cut: the chunks,
    # then the connection closes without the end; stall: the chunks, then nothing until the
    # server shuts down; endless: ``chunks[0]`` again and again until the client hangs up.
    mode: str = "normal"
    chunks: tuple[bytes, ...] = ()


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plans: list[Plan] = []
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # set at shutdown: a stalled answer ends
        self.hangups = 0  # connections the client reset or closed under a handler

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer_with(self, plans: list[Plan]) -> None:
        with self.lock:
            self.plans = list(plans)
            self.requests = []

    def next_plan(self, request: bytes) -> Plan:
        with self.lock:
            self.requests.append(request)
            return self.plans.pop(0) if self.plans else Plan()

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket],
                     client_address: Any) -> None:
        """A client that hung up on a kept-alive connection (the model adapter closing its
        pool, a timeout) is what the fuzz tests make happen: counted, not printed. The
        stdlib server prints every handler error's traceback to stderr, into the middle of
        pytest's progress line; any other error is still printed."""
        if isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError):
            with self.lock:
                self.hangups += 1
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(self.server.next_plan(self.rfile.read(length)))

    def do_GET(self) -> None:
        # Recorded as the request line and the key it came with (``treemail doctor``'s
        # ``GET /models``), answered by the next plan like a POST.
        seen = f"GET {self.path} {self.headers.get('Authorization') or '-'}"
        self._answer(self.server.next_plan(seen.encode()))

    def _answer(self, plan: Plan) -> None:
        if plan.delay:
            time.sleep(plan.delay)
        if plan.mode == "close":
            self._hang_up()
            return
        if plan.mode in ("stream", "cut", "stall", "endless"):
            self._stream(plan)
            return
        self.send_response(plan.status)
        if plan.content_type is not None:
            self.send_header("Content-Type", plan.content_type)
        if plan.retry_after is not None:
            self.send_header("Retry-After", plan.retry_after)
        extra = 1000 if plan.mode == "truncate" else 0
        self.send_header("Content-Length", str(len(plan.body) + extra))
        self.end_headers()
        try:
            self.wfile.write(plan.body)
            self.wfile.flush()
        except OSError:
            return  # the client gave up (its timeout): nothing to do
        if plan.mode == "truncate":
            self._hang_up()

    def _stream(self, plan: Plan) -> None:
        self.send_response(plan.status)
        # A stream is text/event-stream unless the plan names another type than the default.
        kind = plan.content_type if plan.content_type != Plan().content_type else None
        self.send_header("Content-Type", kind or "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in plan.chunks:
                self._chunk(chunk)
            while plan.mode == "endless" and not self.server.stopping.is_set():
                self._chunk(plan.chunks[0])
            if plan.mode == "stall":
                self.server.stopping.wait()
            if plan.mode == "stream":
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except OSError:
            return  # the client gave up
        if plan.mode in ("cut", "stall"):
            self._hang_up()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _hang_up(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


@contextmanager
def serving() -> Iterator[FakeServer]:
    server = FakeServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def sse(*chunks: object) -> tuple[bytes, ...]:
    """Each chunk as one ``data:`` event (a str is sent as it is, e.g. ``[DONE]``; a lone
    surrogate in it goes out as the bytes a broken server would send, not UTF-8)."""
    return tuple(b"data: " + (c.encode("utf-8", "surrogatepass") if isinstance(c, str)
                              else json.dumps(c).encode())
                 + b"\n\n" for c in chunks)


def streamed(*pieces: str, done: bool = True) -> tuple[bytes, ...]:
    """A streamed text reply in ``pieces``, then ``[DONE]`` unless ``done`` is false."""
    deltas = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in pieces]
    return sse(*deltas, *(["[DONE]"] if done else []))
