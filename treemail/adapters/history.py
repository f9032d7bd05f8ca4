"""Rebuilding a session's chat history from its durable log, after eviction or restart.

Each model reply is stored as ``ModelOutput``, with the mail that prompted it, in the
transaction that consumed that mail; tool results follow as ``ToolResults``. The rebuild puts
every call's result right after the assistant message that made it, because chat APIs reject
a tool call left without an answer. When no result was recorded (the run died first, or is
waiting on the user), the best durable knowledge stands in, in this order:

1. the result the actor recorded;
2. the outcome of the approval the call waited for: answered after its run died, the engine
   ran the call then, exactly once, so the woken model sees what happened;
3. a note that the call still awaits the user's approval;
4. for send_message, the idempotency record: the send was accepted before the run died, so
   the model must not believe it failed and send again;
5. a note that the run ended before the call returned, and its effect is unknown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from treemail.adapters.models import tool_result_message
from treemail.core.records import Event, IdempotencyKey
from treemail.core.store import ReadTxn

__all__ = ["AWAITING_APPROVAL", "INTERRUPTED", "rebuild"]

AWAITING_APPROVAL = json.dumps({
    "error": "permission:approval_pending",
    "message": "this call is held until the user answers its approval request; its outcome "
    "will appear here once answered",
})
INTERRUPTED = json.dumps({
    "error": "tool:interrupted",
    "message": "the run ended before this call returned; its effect is unknown, check before "
    "repeating it",
})

_Key = tuple[str, str]  # (run_id, tool_call_id): models reuse call ids across runs


def rebuild(tx: ReadTxn, session_id: str, prompt: str = "") -> list[dict[str, Any]]:
    """The session's conversation so far, as chat messages, from one read transaction."""
    history: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
    history.extend(_conversation(tx, session_id, None))
    return history


def _conversation(tx: ReadTxn, session_id: str, upto: int | None) -> list[dict[str, Any]]:
    """The messages of one session's log (up to ``upto``); a fork starts with its source's."""
    events = [e for e in tx.events(session_id) if upto is None or e.seq <= upto]
    recorded, answered, held = _results(events)
    history: list[dict[str, Any]] = []
    for event in events:
        data = event.data
        if event.kind == "SessionForked":
            history.extend(_conversation(tx, str(data.get("from")), int(str(data.get("upto")))))
        if event.kind != "ModelOutput":
            continue
        history.extend({"role": "user", "content": text} for text in _list(data.get("inputs")))
        history.append(_assistant(data))
        run_id = str(data.get("run_id"))
        for call in _list(data.get("tool_calls")):
            key = (run_id, str(call["id"]))
            content = recorded.get(key, answered.get(key))
            if content is None:
                content = AWAITING_APPROVAL if key in held else _recalled(tx, session_id, key, call)
            history.append(tool_result_message(key[1], content))
    return history


def _results(events: Iterable[Event]) -> tuple[dict[_Key, str], dict[_Key, str], set[_Key]]:
    recorded: dict[_Key, str] = {}
    requested: dict[str, _Key] = {}
    answered: dict[_Key, str] = {}
    for event in events:
        data = event.data
        if event.kind == "ToolResults":
            for result in _list(data.get("results")):
                recorded[(str(data.get("run_id")), result["tool_call_id"])] = result["content"]
        elif event.kind == "ApprovalRequested":
            key = (str(data.get("run_id")), str(data.get("tool_call_id")))
            requested[str(data.get("approval_id"))] = key
        elif event.kind == "ApprovalAnswered":
            found = requested.pop(str(data.get("approval_id")), None)
            if found is not None:
                answered[found] = str(data.get("outcome"))
    return recorded, answered, set(requested.values())


def _recalled(tx: ReadTxn, session_id: str, key: _Key, call: Mapping[str, Any]) -> str:
    if call.get("name") == "send_message":
        sent = tx.recall(IdempotencyKey(session_id, key[0], key[1]))
        if sent is not None:
            return json.dumps(sent.as_tool_result())
    return INTERRUPTED


def _assistant(data: Mapping[str, object]) -> dict[str, Any]:
    assistant: dict[str, Any] = {"role": "assistant", "content": data.get("text")}
    calls = _list(data.get("tool_calls"))
    if calls:
        assistant["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return assistant


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []
