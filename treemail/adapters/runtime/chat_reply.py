"""A chat-completions response body read as a ``ModelReply``: the one check every reply
passes, whole or assembled from a stream (``chat_stream``), so a malformed one is a
``ModelError`` that names what is missing, never a ``KeyError`` deep in the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from treemail.adapters.runtime.model_errors import ModelError

__all__ = ["EXCERPT", "ModelReply", "ToolCall", "excerpt", "parse_reply"]

EXCERPT = 500  # enough of an error body to read the server's reason, not a whole HTML page


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
        shown = excerpt(json.dumps(body, ensure_ascii=False, default=str))
    except (ValueError, RecursionError):
        shown = "(nested too deeply to show)"
    return ModelError(
        f"malformed chat-completions response: {problem}; check the server speaks the "
        f"OpenAI chat-completions format. Body: {shown}",
        status=None, body=shown,
        hint="check the server speaks the OpenAI chat-completions format",
    )


def excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"... ({len(text)} chars)"
