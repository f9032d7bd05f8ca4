"""A streamed chat completion (``stream: true``) read back into one response body.

The server sends Server-Sent Events: ``data: {chunk}`` lines, each chunk a delta of
``choices[0]`` (content pieces, tool-call pieces keyed by ``index``), and ``data: [DONE]`` at
the end. ``StreamAssembler`` takes the body's bytes as they arrive and, at the end, gives the
body a non-streamed reply would have had, so that ``parse_reply`` checks both alike (tool
calls without ids or names are refused the same way).

The peer is untrusted: the caller bounds the bytes fed here, and one line is at most what was
fed, so nothing here grows beyond that bound. Lines that are not ``data:`` (comments, ``event:``,
``id:``, ``retry:``) carry nothing for a chat completion and are skipped, as the SSE format
asks of fields a client does not use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["StreamAssembler", "StreamProblem"]


class StreamProblem(Exception):
    """The stream said something no chat-completions stream says; ``chunk`` is its text."""

    def __init__(self, problem: str, chunk: str) -> None:
        super().__init__(problem)
        self.problem, self.chunk = problem, chunk


class StreamAssembler:
    def __init__(self) -> None:
        self._pending = b""
        self._text: list[str] = []
        self._saw_text = False
        self._calls: dict[int, dict[str, Any]] = {}
        self.done = False  # [DONE] arrived
        self.finished = False  # a chunk carried a finish_reason

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the body; ``StreamProblem`` on a chunk that is not one."""
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def close(self) -> None:
        """The body ended: a last line without its newline still counts."""
        if self._pending:
            line, self._pending = self._pending, b""
            self._line(line.rstrip(b"\r"))

    @property
    def complete(self) -> bool:
        """Whether the stream said it was over ([DONE], or a finish_reason on some servers
        that close without [DONE])."""
        return self.done or self.finished

    def body(self) -> dict[str, Any]:
        """The chat-completions body these chunks add up to."""
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self._text) if self._saw_text else None}
        if self._calls:
            message["tool_calls"] = [self._calls[index] for index in sorted(self._calls)]
        return {"choices": [{"message": message}]}

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:") or self.done:
            return
        text = line[5:].strip().decode("utf-8", "replace")
        if text == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(text)
        except (ValueError, RecursionError):
            raise StreamProblem("a data line is not JSON", text) from None
        if not isinstance(chunk, Mapping):
            raise StreamProblem("a chunk is not a JSON object", text)
        if "error" in chunk:  # some servers report a failure inside a 200 stream
            raise StreamProblem("the server sent an error inside the stream", text)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise StreamProblem("a chunk has no choices list", text)
        if not choices:  # usage-only chunks (stream_options) have no choice
            return
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if not isinstance(delta, Mapping):
            raise StreamProblem("choices[0] has no delta object", text)
        if choice.get("finish_reason") is not None:
            self.finished = True
        self._delta(delta, text)

    def _delta(self, delta: Mapping[str, Any], text: str) -> None:
        content = delta.get("content")
        if isinstance(content, str):
            self._text.append(content)
            self._saw_text = True
        elif isinstance(content, list):  # content parts: only text parts mean anything
            self._text.extend(part["text"] for part in content
                              if isinstance(part, Mapping) and isinstance(part.get("text"), str))
            self._saw_text = True
        elif content is not None:
            raise StreamProblem("delta.content is neither a string, a list of parts nor null",
                                text)
        calls = delta.get("tool_calls")
        if calls is None:
            return
        if not isinstance(calls, list):
            raise StreamProblem("delta.tool_calls is not a list", text)
        for piece in calls:
            if not isinstance(piece, Mapping):
                raise StreamProblem("a tool-call piece is not an object", text)
            self._call_piece(piece, text)

    def _call_piece(self, piece: Mapping[str, Any], text: str) -> None:
        index = piece.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # A server that omits the index: a new id starts a new call, else it continues
            # the last one.
            last = max(self._calls, default=-1)
            fresh = piece.get("id") not in (None, self._calls.get(last, {}).get("id"))
            index = last + 1 if fresh or last < 0 else last
        call = self._calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
        function = piece.get("function")
        function = function if isinstance(function, Mapping) else {}
        if isinstance(piece.get("id"), str) and piece["id"]:
            call["id"] = piece["id"]
        name, known = function.get("name"), call["function"]["name"]
        if isinstance(name, str) and name and name != known:
            # Most servers send the name once; a few in pieces, or whole in every piece.
            call["function"]["name"] = (known or "") + name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments
        elif arguments is not None:
            raise StreamProblem("a tool call's arguments piece is not a string", text)
