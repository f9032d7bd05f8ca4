"""Expiry: agent mail left unclaimed longer than ``[messaging] message_ttl_seconds`` is
discarded with the reason ``expired``.

A message's age is the time it spent pending and unclaimed. Time inside a model request
never counts: the recipient was reading the mail, and an aborted request (a model error, a
crash) must not make the sender's message stale. So one number, ``Message.aged``, carries
the clock through the lifecycle:

* in an unclaimed state (accepted, admitted, released) it is the instant the age counts
  from: ``age = now - aged``;
* while claimed it is the age reached when the request claimed it.

Claiming and releasing both turn one reading into the other with the same step,
``aged := now - aged``, which is why it is one field and not two.

Expiry is opt-in. While it is off (ttl 0) nothing is stamped and every transition clears
the field, so mail carries no clock. Agent mail accepted while it was off, or whose clock a
transition without one cleared, starts its clock at the first expiry check that sees it.
Only agent mail (``send_message``) expires: delegation tasks and results, user and plugin
mail are the runtime's own, and dropping them would strand a tree.

Checks run where the recipient could next read its mail: at its next boundary (a request
opening, an external ``check_mail``) and at reconcile (``Engine.reconcile``, ``recover``).
Claimed mail is never expired, whatever its age.
"""

from __future__ import annotations

from typing import Any

import attrs

from treemail.core.lifecycle import MessageState, MessageTrigger
from treemail.core.records import Message, Owner
from treemail.core.store import WriteTxn
from treemail.core.transitions import step_message

__all__ = ["EXPIRED", "age", "expire_due", "flip"]

EXPIRED = "expired"

# Enum members read once, here: under Python 3.11 a member read through its class goes
# through ``EnumType.__getattr__``'s hook, about ten times the cost of reading a global
# (see ``runs``).
_AGENT = Owner.AGENT
_CLAIMED = MessageState.CLAIMED
_EXPIRE = MessageTrigger.EXPIRE


def flip(message: Message, now: float | None) -> dict[str, Any]:
    """The change to ``aged`` as ``message`` is claimed or released at ``now``: the age
    stops (claim) or resumes (release). Without a clock the field is cleared."""
    if message.aged is None:
        return {}
    if now is None:
        return {"aged": None}
    # max: a wall clock stepped back must not make an age negative.
    return {"aged": max(0.0, now - message.aged)}


def age(message: Message, now: float) -> float | None:
    """How long ``message`` has waited unclaimed by ``now``; None while it has no clock."""
    if message.aged is None:
        return None
    if message.state is _CLAIMED:
        return message.aged
    return max(0.0, now - message.aged)


def expire_due(tx: WriteTxn, session_id: str, now: float | None, ttl: int) -> list[str]:
    """Discard the recipient's agent mail that waited unclaimed ``ttl`` seconds or more;
    start the clock of agent mail that has none. Returns the ids expired, in order."""
    if now is None or ttl <= 0:
        return []
    expired = []
    for message in list(tx.pending(session_id)):
        if message.owner is not _AGENT or message.state is _CLAIMED:
            continue
        waited = age(message, now)
        if waited is None:
            tx.put_message(_stamped(message, now))
        elif waited >= ttl:
            step_message(tx, message, _EXPIRE, reason=EXPIRED, run_id=None)
            expired.append(message.message_id)
    return expired


def _stamped(message: Message, now: float) -> Message:
    return attrs.evolve(message, aged=now)
