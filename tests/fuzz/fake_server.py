"""A local chat-completions server that answers each request by a plan: hostile JSON, bodies
cut short, wrong content types, 5xx with odd Retry-After values, slow answers, or a closed
connection. stdlib ``http.server`` in a thread; plans are taken in order, then it answers a
plain valid reply."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

__all__ = ["FakeServer", "Plan", "serving"]

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
    mode: str = "normal"


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plans: list[Plan] = []
        self.requests: list[bytes] = []
        self.lock = threading.Lock()

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
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
