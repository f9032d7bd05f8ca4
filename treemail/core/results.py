"""Errors as the caller sees them: one place that turns a treemail error into a tool result.

A model sees a failed tool call as the JSON object ``{"error": code, "message": message}``;
the daemon sends the same error as (code, message, data) on the wire. Both come from here,
so a code means the same thing to a model, a user and a plugin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from treemail.core.errors import TreemailError

__all__ = ["CallOutcome", "error_result", "error_text", "ok_text", "read_text", "triple"]


@attrs.frozen
class CallOutcome:
    """What a tool call produced, as data: its result's fields, or its error's code and
    message. Stored as is (an approval's outcome), never as JSON text to parse again."""

    result: Mapping[str, str] | None = None
    error: str | None = None
    message: str | None = None

    @classmethod
    def ok(cls, result: Mapping[str, str]) -> CallOutcome:
        return cls(result=dict(result))

    @classmethod
    def failed(cls, error: TreemailError) -> CallOutcome:
        return cls(error=error.code, message=error.message)

    def as_result(self) -> dict[str, str]:
        """The tool result object the model reads."""
        if self.result is not None:
            return dict(self.result)
        return {"error": self.error or "", "message": self.message or ""}

    def text(self) -> str:
        """The tool result as the JSON text a tool result message carries."""
        return json.dumps(self.as_result())


def triple(error: TreemailError) -> tuple[str, str, dict[str, object]]:
    """(code, message, data): the stable code, what to do, and the error's details as JSON
    values (a detail that is not one is given as its text)."""
    return error.code, error.message, {k: _plain(v) for k, v in error.details.items()}


def error_result(error: TreemailError) -> dict[str, str]:
    """The tool result of a failed call, as the model reads it."""
    return {"error": error.code, "message": error.message}


def error_text(error: TreemailError) -> str:
    """``error_result`` as the JSON text a tool result carries."""
    return json.dumps(error_result(error))


def ok_text(result: Mapping[str, object]) -> str:
    """A successful call's result as the JSON text a tool result carries."""
    return json.dumps(dict(result))


def read_text(text: str) -> dict[str, Any]:
    """A tool result's (or a tool call's arguments') JSON text as its object; ``{}`` for text
    that holds no JSON object, so a reader asks for a field and finds none."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _plain(value: object) -> object:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)
