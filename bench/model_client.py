"""The model client, measured: treemail's own chat-completions client (httpx, ``llm.py``)
against the ``openai`` SDK behind the same ``Model`` seam, each beside the other in one run.

``python -m bench.model_client`` prints import time and resident memory (fresh interpreters,
medians), the time per request against a local chat-completions server (streamed and not),
and what each client reports for a refused key, a server that is down, a base URL without a
scheme, a 500 and a 429 with Retry-After. The SDK is not a dependency: ``pip install openai``
first (the bench extra pulls it).
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from treemail.adapters.runtime.llm import ChatMessage, ModelReply, OpenAICompatibleModel
from treemail.adapters.runtime.model_errors import ModelError

__all__ = ["main"]

STREAMS = (False, True)
MESSAGES = [{"role": "user", "content": "hello"}]
REPLY = {"choices": [{"message": {"role": "assistant", "content": "done"}}]}


class SdkModel:
    """The ``Model`` seam over ``openai.AsyncOpenAI``: what adopting the SDK would take."""

    def __init__(self, base_url: str, api_key: str | None, model: str, *,
                 timeout: float = 120.0, max_retries: int = 0, stream: bool = False) -> None:
        import openai

        # Any: the SDK's overloads are not what is measured, and it may be absent at lint.
        self._client: Any = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "none",
                                          timeout=timeout, max_retries=max_retries)
        self.model, self.stream = model, stream
        self.url = base_url.rstrip("/") + "/chat/completions"

    async def complete(self, messages: Sequence[ChatMessage],
                       tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
        import openai

        try:
            if self.stream:
                parts: list[str] = []
                chunks = await self._client.chat.completions.create(
                    model=self.model, messages=[dict(m) for m in messages],
                    stream=True)
                async for chunk in chunks:
                    if chunk.choices and chunk.choices[0].delta.content:
                        parts.append(chunk.choices[0].delta.content)
                return ModelReply(text="".join(parts))
            done = await self._client.chat.completions.create(
                model=self.model, messages=[dict(m) for m in messages])
            return ModelReply(text=done.choices[0].message.content)
        except openai.APIStatusError as exc:
            raise ModelError(f"{self.url} answered HTTP {exc.status_code}: {exc.message}",
                             status=exc.status_code, url=self.url, hint=None) from exc
        except openai.APIError as exc:
            raise ModelError(f"could not reach {self.url}: {exc}", status=None, url=self.url,
                             hint=None) from exc


# -- a local server ------------------------------------------------------------------------

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    plan: list[tuple[int, dict[str, str]]]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        status, headers = self.server.plan.pop(0) if self.server.plan else (200, {})
        if status == 200 and request.get("stream"):
            body = b"".join(
                b"data: " + json.dumps({"choices": [{"delta": {"content": word}}]}).encode()
                + b"\n\n" for word in ("do", "ne")) + b"data: [DONE]\n\n"
            content_type = "text/event-stream"
        else:
            body = json.dumps(REPLY if status == 200 else {"error": {"message": "no"}}).encode()
            content_type = "application/json"
        self.send_response(status)
        for name, value in {"Content-Type": content_type, **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def _serving() -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.plan = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the measurements ----------------------------------------------------------------------

# The peak resident set from /proc (VmHWM, per address space): ru_maxrss would carry over the
# parent's peak through fork and exec.
_IMPORT = ("import time; t = time.perf_counter(); {stmt}; took = time.perf_counter() - t; "
           "import re; status = open('/proc/self/status').read(); "
           "print(took, re.search(r'VmHWM:\\s+(\\d+)', status)[1])")


def _import_cost(stmt: str, runs: int) -> tuple[float, float]:
    """Median seconds to run ``stmt`` in a fresh interpreter, and its median peak RSS (KiB)."""
    seconds, rss = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _IMPORT.format(stmt=stmt)], check=True,
                             capture_output=True, text=True).stdout.split()
        seconds.append(float(out[0]))
        rss.append(float(out[1]))
    return statistics.median(seconds), statistics.median(rss)


def _own(url: str, stream: bool = False, **options: Any) -> Any:
    if stream:
        options["stream"] = True
    return OpenAICompatibleModel(url, "key", "m", **options)


def _sdk(url: str, stream: bool = False, **options: Any) -> Any:
    return SdkModel(url, "key", "m", stream=stream, **options)


async def _per_request(make: Any, url: str, stream: bool, count: int) -> float:
    model = make(url, stream=stream)
    await model.complete(MESSAGES)  # warm: the first call opens the connection pool
    start = time.perf_counter()
    for _ in range(count):
        await model.complete(MESSAGES)
    return (time.perf_counter() - start) / count


async def _failure(make: Any, url: str, server: _Server | None,
                   plan: list[tuple[int, dict[str, str]]]) -> str:
    if server is not None:
        server.plan = list(plan)
    start = time.perf_counter()
    try:
        await make(url, max_retries=1, timeout=5).complete(MESSAGES)
    except ModelError as exc:
        took = time.perf_counter() - start
        return (f"{took:5.2f}s status={exc.details.get('status')} "
                f"hint={exc.details.get('hint')!r} | {exc.message[:110]}")
    except Exception as exc:  # what leaks out of the seam un-typed
        return f"UNTYPED {type(exc).__name__}: {str(exc)[:100]}"
    return "no error"


def main() -> None:
    runs = 7
    bare = _import_cost("pass", runs)
    own = _import_cost("import treemail.adapters.runtime.llm", runs)
    sdk = _import_cost("import treemail.adapters.runtime.llm, openai", runs)
    print(f"import: bare interpreter {bare[1] / 1024:.1f} MiB; own client "
          f"{own[0] * 1e3:.0f} ms / {own[1] / 1024:.1f} MiB; +openai {sdk[0] * 1e3:.0f} ms / "
          f"{sdk[1] / 1024:.1f} MiB (x{sdk[0] / own[0]:.2f} time, "
          f"+{(sdk[1] - own[1]) / 1024:.1f} MiB)")

    async def measure() -> None:
        with _serving() as server:
            for stream in STREAMS:
                mine = await _per_request(_own, server.url, stream, 300)
                theirs = await _per_request(_sdk, server.url, stream, 300)
                print(f"per request ({'stream' if stream else 'plain'}): own "
                      f"{mine * 1e3:.2f} ms, SDK {theirs * 1e3:.2f} ms (x{theirs / mine:.2f})")
            down = f"http://127.0.0.1:{_closed_port()}/v1"
            cases: list[tuple[str, str, list[tuple[int, dict[str, str]]]]] = [
                ("401", server.url, [(401, {})] * 3),
                ("500", server.url, [(500, {})] * 3),
                ("429 Retry-After: 1", server.url,
                 [(429, {"Retry-After": "1"})] * 3),
                ("down", down, []),
                ("no scheme", down.removeprefix("http://"), []),
            ]
            for name, url, plan in cases:
                for label, make in (("own", _own), ("SDK", _sdk)):
                    print(f"{name:>19} {label:>3}: {await _failure(make, url, server, plan)}")

    asyncio.run(measure())


if __name__ == "__main__":
    main()
