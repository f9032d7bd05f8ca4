"""Model adapters: what the runtime calls to get an LLM's next reply.

A ``Model`` takes chat messages in the OpenAI chat format (``system``/``user``/``assistant``
dicts, assistant ``tool_calls`` and ``tool`` results) and the tool definitions from
``treemail.core.tools``, and returns a ``ModelReply``. Two implementations:

* ``ScriptedModel``: deterministic replies from a script, for tests and the demo.
* ``OpenAICompatibleModel``: ``POST {base_url}/chat/completions`` over httpx.

Every failure of a model call is a ``ModelError`` whose message says what to check. Retrying
is the runtime's decision (a failed request releases its claimed mail), so the HTTP adapter
does not retry unless ``max_retries`` asks it to.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import httpx

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

_EXCERPT = 500  # enough of an error body to read the server's reason, not a whole HTML page


@attrs.frozen
class ToolCall:
    """A tool call the model asked for. ``arguments`` is the raw text when it was not a JSON
    object, so the tool layer, not the adapter, answers with ``invalid_arguments``."""

    id: str
    name: str
    arguments: dict[str, Any] | str


@attrs.frozen
class ModelReply:
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    def as_message(self) -> dict[str, Any]:
        """This reply as the assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments if isinstance(call.arguments, str)
                        else json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in self.tool_calls
            ]
        return message


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
                f"{_excerpt(json.dumps(dict(messages[-1]) if messages else None, default=str))})",
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


class OpenAICompatibleModel:
    """A chat-completions endpoint: OpenAI, or any server speaking the same protocol.

    ``client`` lets the caller share a pooled ``httpx.AsyncClient`` (it is not closed here);
    without one each call opens and closes its own, so no lifecycle is left to manage.
    ``max_retries`` retries 429 and 5xx answers after ``backoff * 2**attempt`` seconds, or
    the server's numeric ``Retry-After`` when it sends one.
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
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
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
        if self._client is not None:
            response = await self._post_retrying(self._client, payload)
        else:
            async with httpx.AsyncClient() as client:
                response = await self._post_retrying(client, payload)
        return parse_reply(_json_body(response, self.url))

    async def _post_retrying(
        self, client: httpx.AsyncClient, payload: Mapping[str, Any]
    ) -> httpx.Response:
        attempt = 0
        while True:
            response = await self._post(client, payload)
            retryable = response.status_code == 429 or response.status_code >= 500
            if response.is_success or not retryable or attempt >= self.max_retries:
                break
            await self._sleep(_delay(response, self.backoff * 2**attempt))
            attempt += 1
        if not response.is_success:
            raise _status_error(response, self.url, attempt + 1)
        return response

    async def _post(self, client: httpx.AsyncClient, payload: Mapping[str, Any]) -> httpx.Response:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            content = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError: a ValueError
            raise ModelError(
                f"the request to {self.url} cannot be encoded as UTF-8 JSON "
                f"({type(exc).__name__}: {_excerpt(str(exc))}); a message holds a lone "
                "surrogate or a value JSON cannot carry",
                status=None, url=self.url, hint="a message cannot be sent as JSON",
            ) from None
        try:
            return await client.post(self.url, content=content, headers=headers,
                                     timeout=self.timeout)
        except httpx.TimeoutException as exc:
            hint = "check the server is up and not overloaded, or raise the timeout"
            raise ModelError(
                f"no answer from {self.url} within {self.timeout}s ({type(exc).__name__}); "
                f"{hint}", status=None, url=self.url, hint=hint,
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError) as exc:
            hint = unreachable_hint(self.base_url)
            raise ModelError(
                f"could not reach {self.url}: {type(exc).__name__}: {exc}; {hint}",
                status=None, url=self.url, hint=hint,
            ) from exc


# The longest a server's Retry-After may make one retry wait: "inf", "1e308" or a day would
# otherwise hang the run; nan is no number at all.
MAX_RETRY_AFTER = 60.0


def _delay(response: httpx.Response, fallback: float) -> float:
    try:
        asked = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return fallback
    return min(max(0.0, asked), MAX_RETRY_AFTER) if math.isfinite(asked) else fallback


def _status_error(response: httpx.Response, url: str, attempts: int) -> ModelError:
    status = response.status_code
    hint = _HINTS.get(status, "the server failed; retry later" if status >= 500
                      else "check the request against the server's API")
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    body = _excerpt(_text(response))
    return ModelError(f"{url} answered HTTP {status}{tries}: {hint}. Body: {body}",
                      status=status, body=body, url=url, hint=hint)


def _text(response: httpx.Response) -> str:
    """The body as text by its declared charset, or as UTF-8 with replacements when that
    charset is unknown or does not decode it (the server's text is only ever reported)."""
    try:
        return response.text
    except (UnicodeError, LookupError):
        return response.content.decode("utf-8", "replace")


def _json_body(response: httpx.Response, url: str) -> object:
    try:
        return json.loads(_text(response))
    except (ValueError, RecursionError):  # nested past the parser's limit is not JSON to us
        body = _excerpt(_text(response))
        hint = "check base_url points at a chat-completions API"
        raise ModelError(
            f"{url} answered HTTP {response.status_code} with a body that is not JSON; {hint}. "
            f"Body: {body}",
            status=response.status_code, body=body, url=url, hint=hint,
        ) from None


def parse_reply(body: object) -> ModelReply:
    """A chat-completions response body as a ``ModelReply``; ``ModelError`` if malformed."""
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise _malformed("no choices[0]", body)
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise _malformed("choices[0] has no message object", body)
    raw_calls = message.get("tool_calls")
    raw_calls = [] if raw_calls is None else raw_calls
    if not isinstance(raw_calls, list):
        raise _malformed("message.tool_calls is not a list", body)
    calls = tuple(_tool_call(index, call, body) for index, call in enumerate(raw_calls))
    return ModelReply(text=_content(message.get("content"), body), tool_calls=calls)


def _content(content: object, body: object) -> str | None:
    if content is None or isinstance(content, str):
        return content
    # Some servers send content as parts; only text parts mean anything to the runtime.
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, Mapping)]
        return "".join(text for text in texts if isinstance(text, str))
    raise _malformed("message.content is neither a string, a list of parts nor null", body)


def _tool_call(index: int, call: object, body: object) -> ToolCall:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(call, Mapping) or not isinstance(function, Mapping):
        raise _malformed(f"tool_calls[{index}] has no function object", body)
    call_id, name = call.get("id"), function.get("name")
    # No invented ids: the tool call id keys send_message's idempotency, and a made-up one
    # could collide with an earlier call and replay its result instead of sending.
    if not isinstance(call_id, str) or not call_id:
        raise _malformed(f"tool_calls[{index}] has no id", body)
    if not isinstance(name, str) or not name:
        raise _malformed(f"tool_calls[{index}] has no function name", body)
    return ToolCall(id=call_id, name=name, arguments=_arguments(function.get("arguments")))


def _arguments(raw: object) -> dict[str, Any] | str:
    if isinstance(raw, Mapping):  # a few servers send the object itself, not its JSON text
        return dict(raw)
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # the tool layer answers invalid_arguments to text
        return text
    return parsed if isinstance(parsed, dict) else text


def _malformed(problem: str, body: object) -> ModelError:
    try:
        excerpt = _excerpt(json.dumps(body, ensure_ascii=False, default=str))
    except (ValueError, RecursionError):
        excerpt = "(nested too deeply to show)"
    return ModelError(
        f"malformed chat-completions response: {problem}; check the server speaks the "
        f"OpenAI chat-completions format. Body: {excerpt}",
        status=None, body=excerpt,
        hint="check the server speaks the OpenAI chat-completions format",
    )


def unreachable_hint(base_url: str) -> str:
    """What to check when ``base_url`` cannot be reached: its scheme first, since a URL
    without one (``localhost:8000/v1``) fails before any connection is tried."""
    scheme = base_url.split("://", 1)[0].lower() if "://" in base_url else ""
    if scheme not in ("http", "https"):
        return (f"base_url {base_url!r} has no http:// or https:// scheme; write it as "
                f"http://{base_url.split('://')[-1]}")
    return "check base_url and that the server is running"


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + f"... ({len(text)} chars)"
