"""The reference model's receipts, recall and expiry, re-stated from the contract and
``spec/external.md`` without the engine's code (the engine keeps one number per message and
flips it; here the two quantities are kept apart, as the rule says them).

A message's age is the time it spent pending and unclaimed: ``waited`` sums the unclaimed
spans that ended (at a claim), ``since`` is when the current one began (None while claimed).
While expiry is off no message has a clock (``waited`` is None), and a step taken without a
clock forgets one; expiry checks start the clock of agent mail that has none.

``Reference`` calls these on itself: they read and step its world.
"""

from __future__ import annotations

from typing import Any

from treemail.core import errors
from treemail.core.lifecycle import MessageState, MessageTrigger
from treemail.core.records import Owner
from treemail.models.world import FINAL, MessageRecord

# The reference model these read and step (``Reference``; not imported: it imports this).
Reference = Any

__all__ = ["CANCELLED", "EXPIRED", "Status", "expire_due", "now_of", "on_claim", "on_release",
           "recall", "stamp", "status"]

CANCELLED = "cancelled by sender"
EXPIRED = "expired"
_RECALLABLE = (MessageState.ACCEPTED, MessageState.ADMITTED, MessageState.RELEASED)

# (message id, recipient, state, reason): what a receipt says.
Status = tuple[str, str, str, str | None]


def now_of(model: Reference) -> float | None:
    """The instant expiry reads; None while expiry is off (nothing is stamped)."""
    return model.clock.now() if model.config.message_ttl_seconds > 0 else None


def status(model: Reference, session_id: str, message_id: str) -> Status:
    return _status(_own(model, session_id, message_id))


def recall(model: Reference, session_id: str, message_id: str) -> Status:
    """The sender's recall: only from accepted, admitted or released."""
    message = _own(model, session_id, message_id)
    if message.state not in _RECALLABLE:
        raise errors.CancelTooLate(f"message {message_id} is {message.state}")
    model._step_message(message, MessageTrigger.CANCEL)
    message.run_id, message.reason = None, CANCELLED
    return _status(message)


def expire_due(model: Reference, session_id: str, now: float | None) -> list[str]:
    """Agent mail of the recipient that waited unclaimed the TTL or longer is discarded as
    expired; agent mail without a clock gets one now."""
    ttl = model.config.message_ttl_seconds
    if now is None or ttl <= 0:
        return []
    expired = []
    for message in model.world.pending_of(session_id):
        if message.owner is not Owner.AGENT or message.state == MessageState.CLAIMED:
            continue
        if message.waited is None:
            message.waited, message.since = 0.0, now
        elif _age(message, now) >= ttl:
            model._step_message(message, MessageTrigger.EXPIRE)
            message.run_id, message.reason = None, EXPIRED
            expired.append(message.message_id)
    return expired


def stamp(message: MessageRecord, now: float | None) -> None:
    """A send's mail starts its clock at acceptance."""
    if now is not None and message.owner is Owner.AGENT:
        message.waited, message.since = 0.0, now


def on_claim(message: MessageRecord, now: float | None) -> None:
    """A request took the message: its unclaimed span ends."""
    if message.waited is None:
        return
    if now is None or message.since is None:
        message.waited, message.since = None, None
        return
    message.waited, message.since = message.waited + max(0.0, now - message.since), None


def on_release(message: MessageRecord, now: float | None) -> None:
    """The request aborted: a new unclaimed span begins."""
    if message.waited is None:
        return
    if now is None:
        message.waited = None
    message.since = now


def _age(message: MessageRecord, now: float) -> float:
    assert message.waited is not None and message.since is not None
    return message.waited + max(0.0, now - message.since)


def _own(model: Reference, session_id: str, message_id: str) -> MessageRecord:
    message: MessageRecord | None = model.world.messages.get(message_id)
    if message is None or message.owner is not Owner.AGENT or message.sender != session_id:
        raise errors.UnknownSentMessage(f"{session_id} sent no message {message_id}")
    return message


def _status(message: MessageRecord) -> Status:
    reason = message.reason if message.state in FINAL else None
    return message.message_id, message.recipient, str(message.state), reason
