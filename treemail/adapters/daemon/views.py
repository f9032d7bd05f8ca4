"""The core's records as the wire shows them: the result types of protocol 19, built from a
session, run, message, approval or event. The daemon's methods answer with these, and the
UI builds the same views from a store it reads directly, so both show one shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from treemail.core import results
from treemail.core.records import (
    Approval,
    Event,
    Message,
    Mode,
    Owner,
    RecipientState,
    Run,
    Session,
)
from treemail.core.results import CallOutcome
from treemail.protocol import types as t

__all__ = ["accepted_view", "approval_view", "event_view", "message_view", "run_view",
           "sent_view", "session_view"]


def session_view(session: Session) -> t.SessionView:
    return t.SessionView(
        session_id=session.session_id, root_session_id=session.root_session_id,
        parent_session_id=session.parent_session_id, handle=session.handle,
        agent=session.agent.name, state=session.state, run_id=session.run_id,
        live=session.live)


def message_view(message: Message) -> t.MessageView:
    return t.MessageView(
        message_id=message.message_id, recipient=message.recipient, sender=message.sender,
        owner=message.owner, mode=message.mode, state=message.state,
        body=message.body, run_id=message.run_id, reason=message.reason)


def run_view(run: Run) -> t.RunView:
    return t.RunView(run_id=run.run_id, session_id=run.session_id, number=run.number,
                     status=run.status, base_hop=run.base_hop)


def accepted_view(message: Message, mode: Mode,
                  recipient_state: RecipientState) -> t.ProducerAccepted:
    """An accept as its sender sees it; ``agent_hop`` only for agent mail."""
    return t.ProducerAccepted(
        message_id=message.message_id, session_id=message.recipient,
        owner=message.owner, mode=mode, recipient_state=recipient_state,
        agent_hop=message.hop if message.owner is Owner.AGENT else None)


async def sent_view(tool: str, content: str,
                    message: Callable[[str], Awaitable[Message]]) -> t.ProducerAccepted | None:
    """The mail a ``send_message`` tool call accepted, as its sender sees it, read back through
    ``message`` (the caller owns the store read); None for any other tool, and for a refused
    send, whose content is the tool error: it accepted nothing."""
    answer = results.read_text(content) if tool == "send_message" else {}
    message_id = answer.get("message_id")
    if not isinstance(message_id, str):
        return None
    return accepted_view(await message(message_id), Mode(answer["mode"]),
                         RecipientState(answer["recipient_state"]))


def approval_view(a: Approval) -> t.ApprovalView:
    return t.ApprovalView(
        approval_id=a.approval_id, session_id=a.session_id, run_id=a.run_id,
        tool_call_id=a.tool_call_id, tool=a.tool, arguments=dict(a.arguments), label=a.label,
        state=a.state, scope=a.scope, outcome=_outcome(a.outcome))


def _outcome(outcome: CallOutcome | None) -> t.ApprovalOutcome | None:
    """The outcome in the ``ApprovalAnswered`` event's shape: the same object on both."""
    if outcome is None:
        return None
    result = dict(outcome.result) if outcome.result is not None else None
    return t.ApprovalOutcome(result=result, error=outcome.error, message=outcome.message)


def event_view(number: int, event: Event) -> t.EventView:
    """An event of the durable feed, with its feed ``number``."""
    return t.EventView(number=number, session_id=event.session_id, seq=event.seq,
                       kind=event.kind, data=dict(event.data))
