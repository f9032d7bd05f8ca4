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

from collections.abc import Iterable
from typing import Any

from treemail.adapters.runtime.llm import tool_result_message
from treemail.core import events
from treemail.core.errors import ApprovalPending, ToolInterrupted
from treemail.core.records import IdempotencyKey
from treemail.core.results import error_text, ok_text
from treemail.core.store import ReadTxn

__all__ = ["AWAITING_APPROVAL", "INTERRUPTED", "rebuild"]

AWAITING_APPROVAL = error_text(ApprovalPending(
    "this call is held until the user answers its approval request; its outcome "
    "will appear here once answered"))
INTERRUPTED = error_text(ToolInterrupted(
    "the run ended before this call returned; its effect is unknown, check before "
    "repeating it"))

_Key = tuple[str, str]  # (run_id, tool_call_id): models reuse call ids across runs


def rebuild(tx: ReadTxn, session_id: str, prompt: str = "") -> list[dict[str, Any]]:
    """The session's conversation so far, as chat messages, from one read transaction."""
    history: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
    history.extend(_conversation(tx, session_id, None))
    return history


def _conversation(tx: ReadTxn, session_id: str, upto: int | None) -> list[dict[str, Any]]:
    """The messages of one session's log (up to ``upto``); a fork starts with its source's.
    An entry this version cannot read (``UnknownEvent``) is skipped."""
    log = [p for e, p in events.typed(tx.events(session_id)) if upto is None or e.seq <= upto]
    recorded, answered, held = _results(log)
    history: list[dict[str, Any]] = []
    for payload in log:
        if isinstance(payload, events.SessionForked):
            history.extend(_conversation(tx, payload.source, payload.upto))
        if not isinstance(payload, events.ModelOutput):
            continue
        history.extend({"role": "user", "content": text} for text in payload.inputs)
        history.append(_assistant(payload))
        for call in payload.tool_calls:
            key = (payload.run_id, call.id)
            content = recorded.get(key, answered.get(key))
            if content is None:
                content = AWAITING_APPROVAL if key in held else _recalled(tx, session_id, key, call)
            history.append(tool_result_message(call.id, content))
    return history


def _results(
    log: Iterable[events.Payload | events.UnknownEvent],
) -> tuple[dict[_Key, str], dict[_Key, str], set[_Key]]:
    recorded: dict[_Key, str] = {}
    requested: dict[str, _Key] = {}
    answered: dict[_Key, str] = {}
    for payload in log:
        if isinstance(payload, events.ToolResults):
            for result in payload.results:
                recorded[(payload.run_id, result.tool_call_id)] = result.content
        elif isinstance(payload, events.ApprovalRequested):
            requested[payload.approval_id] = (payload.run_id, payload.tool_call_id)
        elif isinstance(payload, events.ApprovalAnswered):
            found = requested.pop(payload.approval_id, None)
            if found is not None:
                answered[found] = payload.outcome.text()
    return recorded, answered, set(requested.values())


def _recalled(tx: ReadTxn, session_id: str, key: _Key, call: events.RecordedCall) -> str:
    if call.name == "send_message":
        sent = tx.recall(IdempotencyKey(session_id, key[0], key[1]))
        if sent is not None:
            return ok_text(sent.as_tool_result())
    return INTERRUPTED


def _assistant(output: events.ModelOutput) -> dict[str, Any]:
    assistant: dict[str, Any] = {"role": "assistant", "content": output.text}
    if output.tool_calls:
        assistant["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in output.tool_calls
        ]
    return assistant
