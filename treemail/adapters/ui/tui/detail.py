"""One transcript row read whole: what the row shortens (a body, a model's text, a tool call's
arguments, a result) from the events folded into it, as lines of plain text.

Every line is the agent's text with its control characters escaped (``terminal.visible``),
line by line, so a body keeps its line breaks and still sends the terminal no command.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from treemail.adapters.ui.feed import outcome_text
from treemail.adapters.ui.terminal import visible
from treemail.adapters.ui.transcript import Namer, Row
from treemail.core import events
from treemail.core.records import Event

__all__ = ["detail"]


def _lines(text: str) -> str:
    return "\n".join(visible(line) for line in text.split("\n"))


def _arguments(text: str) -> str:
    """A call's arguments: one ``name: value`` line each, a long value whole."""
    try:
        value = json.loads(text)
    except ValueError:
        return _lines(text)
    if not isinstance(value, dict):
        return _lines(text)
    return "\n".join(f"  {key}: {_lines(str(item))}" for key, item in value.items())


def _part(payload: events.Payload | events.UnknownEvent, name: Namer) -> list[str]:
    """What one event adds to the row read whole."""
    if isinstance(payload, events.ProducerMessageAccepted):
        sender = f" from {name(payload.sender)}" if payload.sender else ""
        hop = f", hop {payload.agent_hop}" if payload.agent_hop is not None else ""
        return [f"{payload.owner.OWNER.value} mail{sender}, mode {payload.mode.value}{hop}",
                "", _lines(payload.body), ""]
    if isinstance(payload, events.ModelOutput):
        said = [_lines(payload.text), ""] if payload.text else []
        return said + [f"calls {call.name}:\n{_arguments(call.arguments)}"
                       for call in payload.tool_calls]
    if isinstance(payload, events.ToolResults):
        return [f"result of {result.tool_call_id}: {_lines(outcome_text(result.content))}"
                for result in payload.results]
    if isinstance(payload, events.ApprovalAnswered):
        scope = f" (scope {payload.scope})" if payload.scope else ""
        return [f"{payload.state.value}{scope}: {_lines(outcome_text(payload.outcome.text()))}"]
    if isinstance(payload, events.UnknownEvent):
        return [_lines(f"{payload.kind}: {payload.reason}")]
    return []


def detail(row: Row, folded: Sequence[Event], name: Namer) -> tuple[str, str]:
    """(heading, body) of ``row``, from ``folded``, the events folded into it."""
    heading = f"{row.who}  #{row.seq}  {row.text}"
    body: list[str] = []
    steps: list[str] = []
    for event in folded:
        payload = events.read(event)
        body += _part(payload, name)
        if isinstance(payload, events.MESSAGE_PAYLOADS):
            reason = (f": {visible(payload.reason)}"
                      if isinstance(payload, events.ProducerMessageDiscarded) else "")
            steps.append(f"#{event.seq} {events.message_state(payload)}{reason}")
    if steps:
        body.append("lifecycle: " + ", ".join(steps))
    if not body:  # nothing longer than the row itself
        body.append(row.text)
    return heading, "\n".join(body).strip("\n")
