"""Model adapters: what the runtime calls to get an LLM's next reply.

A ``Model`` takes chat messages in the OpenAI chat format (``system``/``user``/``assistant``
dicts, assistant ``tool_calls`` and ``tool`` results) and the tool definitions from
``treemail.core.tools``, and returns a ``ModelReply``. Two implementations:

* ``ScriptedModel``: deterministic replies from a script, for tests and the demo.
* ``OpenAICompatibleModel``: ``POST {base_url}/chat/completions`` over httpx, the reply whole
  or streamed (``chat_stream``).

Every failure of a model call is a ``ModelError`` whose message says what to check. Retrying
is the runtime's decision (a failed request releases its claimed mail), so the HTTP adapter
does not retry unless ``max_retries`` asks it to.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import httpx

from treemail.adapters.runtime.chat_reply import EXCERPT, ModelReply, ToolCall, excerpt, parse_reply
from treemail.adapters.runtime.chat_stream import StreamAssembler, StreamProblem
from treemail.adapters.runtime.model_errors import ModelError, ScriptExhausted
from treemail.core.envelope import render_tool_result

__all__ = [
    "ChatMessage",
    "Model",
    "ModelError",
    "ModelReply",
    "OpenAICompatibleModel",
    "ScriptExhausted",
    "ScriptedModel",
    "ToolCall",
    "parse_reply",
    "tool_result_message",
    "unreachable_hint",
]

ChatMessage = Mapping[str, Any]
"""One chat message in the OpenAI format, e.g. ``{"role": "user", "content": "..."}``."""


def tool_result_message(call_id: str, content: str) -> dict[str, Any]:
    """The ``tool`` message that answers the tool call ``call_id``: live and rebuilt alike,
    through the one rendering module, since a result may quote a child's output or a
    plugin's refusal."""
    return {"role": "tool", "tool_call_id": call_id, "content": render_tool_result(content)}


class Model(Protocol):
    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        """The model's next reply to ``messages``, offered ``tools``."""
        ...


# -- scripted ----------------------------------------------------------------------------

Step = ModelReply | ToolCall | str
Responder = Callable[[Sequence[ChatMessage]], ModelReply]


class ScriptedModel:
    """Replies from a script: a list of steps, taken in order, or a function of the messages.

    A step is a ``ModelReply``, a ``ToolCall`` (a reply with just that call) or a string (a
    text reply). Every request is recorded in ``requests`` as (messages, tools) copies, so a
    test can assert what the model was shown.
    """

    def __init__(self, script: Iterable[Step] | Responder) -> None:
        self._responder: Responder | None = None
        self._steps: list[ModelReply] = []
        if callable(script):
            self._responder = script
        else:
            self._steps = [_as_reply(step) for step in script]
        self._next = 0
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    @property
    def remaining(self) -> int:
        """Steps not yet replied (0 for a function script)."""
        return len(self._steps) - self._next

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        # Copies, so that a caller mutating its history later does not rewrite the record.
        self.requests.append(
            ([copy.deepcopy(dict(m)) for m in messages], [copy.deepcopy(dict(t)) for t in tools])
        )
        if self._responder is not None:
            return self._responder(messages)
        if self._next >= len(self._steps):
            raise ScriptExhausted(
                f"the script has {len(self._steps)} step(s) and all were used; request "
                f"{len(self.requests)} has no reply. Add a step, or check the run is not "
                "looping (the last message was "
                f"{excerpt(json.dumps(dict(messages[-1]) if messages else None, default=str))})",
                steps=len(self._steps),
            )
        reply = self._steps[self._next]
        self._next += 1
        return reply


def _as_reply(step: Step) -> ModelReply:
    if isinstance(step, ModelReply):
        return step
    if isinstance(step, ToolCall):
        return ModelReply(tool_calls=(step,))
    if isinstance(step, str):
        return ModelReply(text=step)
    raise TypeError(f"a script step is a ModelReply, ToolCall or str, not {type(step).__name__}")


# -- OpenAI-compatible HTTP --------------------------------------------------------------

Sleep = Callable[[float], Awaitable[None]]

_HINTS = {
    400: "the server rejected the request; check the model name and the tool schemas",
    401: "check the API key (the variable [daemon.openai] api_key_env names)",
    403: "check the API key and that it may use this model",
    404: "check base_url (it usually ends in /v1) and the model name",
    429: "rate limited; retry later or lower the request rate",
}

# The most a reply may weigh, streamed or not: a peer that sends without end must not grow the
# daemon's memory without bound. A long reply with tool calls is tens of KiB.
DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024
# The longest a stream may go without a byte: a server that stalls mid-reply fails this soon,
# not after the whole call's timeout.
DEFAULT_IDLE_TIMEOUT = 60.0


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every call's client: building one loads the CA bundle, which took
    78 ms per call against 0.3 ms for a client sharing it (bench.model_client)."""
    return httpx.create_ssl_context()


@attrs.frozen
class _Refused:
    """A non-2xx answer: retried or reported."""

    status: int
    body: str
    retry_after: str | None


class OpenAICompatibleModel:
    """A chat-completions endpoint: OpenAI, or any server speaking the same protocol.

    ``client`` lets the caller share a pooled ``httpx.AsyncClient`` (it is not closed here);
    without one each call opens and closes its own, so no lifecycle is left to manage.
    ``max_retries`` retries 429 and 5xx answers after ``backoff * 2**attempt`` seconds, or
    the server's numeric ``Retry-After`` when it sends one.

    ``timeout`` bounds one attempt whole, from sending to the last byte, so a server trickling
    a byte at a time cannot hold a call open. ``stream`` asks for the reply as Server-Sent
    Events; then ``idle_timeout`` bounds each wait for the next bytes. Either way a reply
    longer than ``max_reply_bytes`` fails instead of being read on.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        *,
        timeout: float = 120.0,
        client: httpx.AsyncClient | None = None,
        max_retries: int = 0,
        backoff: float = 1.0,
        sleep: Sleep = asyncio.sleep,
        stream: bool = False,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if max_reply_bytes < 1:
            raise ValueError("max_reply_bytes must be >= 1")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.stream = stream
        self.idle_timeout = idle_timeout
        self.max_reply_bytes = max_reply_bytes
        self._api_key = api_key
        self._client = client
        self._sleep = sleep

    def __repr__(self) -> str:
        # The API key stays out of reprs, and so out of logs and tracebacks.
        return f"OpenAICompatibleModel(url={self.url!r}, model={self.model!r})"

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        payload: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if tools:
            payload["tools"] = [dict(t) for t in tools]
        if self.stream:
            payload["stream"] = True
        content = self._encode(payload)
        if self._client is not None:
            return await self._retrying(self._client, content)
        async with httpx.AsyncClient(verify=_tls()) as client:
            return await self._retrying(client, content)

    async def _retrying(self, client: httpx.AsyncClient, content: bytes) -> ModelReply:
        attempt = 0
        while True:
            answer = await self._attempt(client, content)
            if isinstance(answer, ModelReply):
                return answer
            retryable = answer.status == 429 or answer.status >= 500
            if not retryable or attempt >= self.max_retries:
                raise _status_error(answer, self.url, attempt + 1)
            await self._sleep(_delay(answer.retry_after, self.backoff * 2**attempt))
            attempt += 1

    def _encode(self, payload: Mapping[str, Any]) -> bytes:
        try:
            return json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError: a ValueError
            raise ModelError(
                f"the request to {self.url} cannot be encoded as UTF-8 JSON "
                f"({type(exc).__name__}: {excerpt(str(exc))}); a message holds a lone "
                "surrogate or a value JSON cannot carry",
                status=None, url=self.url, hint="a message cannot be sent as JSON",
            ) from None

    async def _attempt(self, client: httpx.AsyncClient,
                       content: bytes) -> ModelReply | _Refused:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # httpx's read timeout bounds each wait for bytes; the deadline bounds them all.
        per_read = min(self.idle_timeout, self.timeout) if self.stream else self.timeout
        request = client.build_request("POST", self.url, content=content, headers=headers,
                                       timeout=httpx.Timeout(self.timeout, read=per_read))
        reader = _Reader(self.url, self.max_reply_bytes)
        try:
            async with asyncio.timeout(self.timeout):
                response = await client.send(request, stream=True)
                try:
                    return await reader.answer(response)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self._timed_out("the deadline", reader) from None
        except httpx.TimeoutException as exc:
            raise self._timed_out(type(exc).__name__, reader) from exc
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError) as exc:
            if reader.status is not None:  # it answered, then the connection broke
                hint = "the server dropped the connection mid-reply; retry later"
                raise ModelError(
                    f"the reply from {self.url} broke off after {reader.received} bytes "
                    f"({type(exc).__name__}: {exc}); {hint}",
                    status=reader.status, url=self.url, hint=hint) from exc
            hint = unreachable_hint(self.base_url)
            raise ModelError(
                f"could not reach {self.url}: {type(exc).__name__}: {exc}; {hint}",
                status=None, url=self.url, hint=hint,
            ) from exc

    def _timed_out(self, what: str, reader: _Reader) -> ModelError:
        if self.stream and reader.status is not None and what != "the deadline":
            hint = ("the stream went silent; check the server is not overloaded, or raise "
                    "[daemon.openai] idle_timeout")
            return ModelError(
                f"the stream from {self.url} sent nothing for {self.idle_timeout}s after "
                f"{reader.received} bytes; {hint}", status=reader.status, url=self.url,
                hint=hint)
        hint = "check the server is up and not overloaded, or raise the timeout"
        return ModelError(f"no answer from {self.url} within {self.timeout}s ({what}); {hint}",
                          status=None, url=self.url, hint=hint)


@attrs.define
class _Reader:
    """One response's body, read within ``limit`` bytes."""

    url: str
    limit: int
    status: int | None = None
    received: int = 0

    async def answer(self, response: httpx.Response) -> ModelReply | _Refused:
        self.status = response.status_code
        if not response.is_success:
            body = _decoded(await self._bytes(response, keep=EXCERPT * 8), response)
            return _Refused(response.status_code, body, response.headers.get("Retry-After"))
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            return await self._streamed(response)
        # A server that ignores stream: true answers one JSON body: read it as such.
        return self._parsed(_json_body(_decoded(await self._bytes(response), response),
                                       response.status_code, self.url))

    def _parsed(self, body: object) -> ModelReply:
        """``parse_reply``, its refusal naming the endpoint that sent the body."""
        try:
            return parse_reply(body)
        except ModelError as error:
            raise ModelError(error.message, **{**error.details, "url": self.url}) from None

    async def _bytes(self, response: httpx.Response, keep: int | None = None) -> bytes:
        parts: list[bytes] = []
        async for part in response.aiter_bytes():
            self._count(part)
            if keep is None or sum(map(len, parts)) < keep:
                parts.append(part)
        return b"".join(parts)

    async def _streamed(self, response: httpx.Response) -> ModelReply:
        assembler = StreamAssembler()
        try:
            async for part in response.aiter_bytes():
                self._count(part)
                assembler.feed(part)
                if assembler.done:
                    break  # the reply is whole: what a server sends after [DONE] is not read
            assembler.close()
        except StreamProblem as problem:
            raise _malformed_stream(problem.problem, problem.chunk, self.url, self.status) \
                from None
        if not assembler.complete:
            hint = "the server closed the stream before [DONE]; retry later"
            raise ModelError(f"the stream from {self.url} ended after {self.received} bytes "
                             f"without [DONE]; {hint}", status=self.status, url=self.url,
                             hint=hint)
        return self._parsed(assembler.body())

    def _count(self, part: bytes) -> None:
        self.received += len(part)
        if self.received > self.limit:
            hint = ("the reply is larger than [daemon.openai] max_reply_bytes allows; raise "
                    "it, or check the server is not sending without end")
            raise ModelError(f"the reply from {self.url} passed {self.limit} bytes; {hint}",
                             status=self.status, url=self.url, hint=hint)


# The longest a server's Retry-After may make one retry wait: "inf", "1e308" or a day would
# otherwise hang the run; nan is no number at all.
MAX_RETRY_AFTER = 60.0


def _delay(retry_after: str | None, fallback: float) -> float:
    try:
        asked = float(retry_after or "")
    except ValueError:
        return fallback
    return min(max(0.0, asked), MAX_RETRY_AFTER) if math.isfinite(asked) else fallback


def _status_error(refused: _Refused, url: str, attempts: int) -> ModelError:
    status = refused.status
    hint = _HINTS.get(status, "the server failed; retry later" if status >= 500
                      else "check the request against the server's API")
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    body = excerpt(refused.body)
    return ModelError(f"{url} answered HTTP {status}{tries}: {hint}. Body: {body}",
                      status=status, body=body, url=url, hint=hint)


def _decoded(raw: bytes, response: httpx.Response) -> str:
    """The body as text by its declared charset, or as UTF-8 with replacements when that
    charset is unknown or does not decode it (the server's text is only ever reported)."""
    try:
        return raw.decode(response.charset_encoding or "utf-8")
    except (UnicodeError, LookupError):
        return raw.decode("utf-8", "replace")


def _json_body(text: str, status: int, url: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's limit is not JSON to us
        body = excerpt(text)
        hint = "check base_url points at a chat-completions API"
        raise ModelError(
            f"{url} answered HTTP {status} with a body that is not JSON; {hint}. "
            f"Body: {body}",
            status=status, body=body, url=url, hint=hint,
        ) from None


def _malformed_stream(problem: str, chunk: str, url: str, status: int | None) -> ModelError:
    hint = "check the server speaks the OpenAI chat-completions format, or set stream = false"
    shown = excerpt(chunk)
    return ModelError(f"malformed chat-completions stream from {url}: {problem}; {hint}. "
                      f"Chunk: {shown}", status=status, body=shown, url=url, hint=hint)

def unreachable_hint(base_url: str) -> str:
    """What to check when ``base_url`` cannot be reached: its scheme first, since a URL
    without one (``localhost:8000/v1``) fails before any connection is tried."""
    scheme = base_url.split("://", 1)[0].lower() if "://" in base_url else ""
    if scheme not in ("http", "https"):
        return (f"base_url {base_url!r} has no http:// or https:// scheme; write it as "
                f"http://{base_url.split('://')[-1]}")
    return "check base_url and that the server is running"
