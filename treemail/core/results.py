"""Errors as the caller sees them: one place that turns a treemail error into a tool result.

A model sees a failed tool call as the JSON object ``{"error": code, "message": message}``;
the daemon sends the same error as (code, message, data) on the wire. Both come from here,
so a code means the same thing to a model, a user and a plugin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from treemail.core.errors import TreemailError

__all__ = ["error_result", "error_text", "ok_text", "triple"]


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


def _plain(value: object) -> object:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)
