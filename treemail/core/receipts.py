"""Receipts and recall: a sender's own view of the agent mail it sent, and its cancel.

A receipt is the message's lifecycle state as its sender may see it: pending (accepted,
admitted, claimed, released), then consumed, or discarded with the reason (an operator's,
``cancelled by sender``, ``expired``). Only the sender asks: any other session, and any
id that names no agent mail of the caller, gets the same ``receipt:unknown_message``, so a
receipt never tells one session whether another's message exists.

Cancel recalls mail nobody has read: from accepted, admitted or released, never once a
request claimed it (it may be inside a model's context already) and never after it is
final. A cancel that loses the race with a claim is answered ``receipt:too_late`` with the
state it found; the store is untouched. A cancelled message is discarded like any other, so
the caps it held (inbox, per-pair window) are freed in the same step and the recipient's log
records the discard with its reason.
"""

from __future__ import annotations

import attrs

from treemail.core.errors import CancelTooLate, UnknownSentMessage
from treemail.core.ids import storable
from treemail.core.lifecycle import MESSAGE, MessageState, MessageTrigger
from treemail.core.records import Message, Owner
from treemail.core.store import ReadTxn, WriteTxn
from treemail.core.transitions import step_message

__all__ = ["CANCELLED", "Receipt", "cancel", "status"]

CANCELLED = "cancelled by sender"


@attrs.frozen
class Receipt:
    """A sent message as its sender sees it; ``reason`` only once it is discarded."""

    message_id: str
    recipient: str
    state: MessageState
    reason: str | None

    @property
    def final(self) -> bool:
        return MESSAGE.is_final(self.state)

    def as_result(self) -> dict[str, object]:
        return {"message_id": self.message_id, "recipient_session_id": self.recipient,
                "state": self.state.value, "final": self.final, "reason": self.reason}


def receipt(message: Message) -> Receipt:
    return Receipt(message.message_id, message.recipient, message.state, message.reason)


def sent_by(tx: ReadTxn, session_id: str, message_id: str) -> Message:
    """The agent mail ``session_id`` sent as ``message_id``; one refusal for every other
    case, so the answer leaks nothing about mail the caller did not send."""
    message = tx.message(message_id) if storable(message_id) else None
    if message is None or message.owner is not Owner.AGENT or message.sender != session_id:
        raise UnknownSentMessage(
            f"you sent no message {message_id!r}; use a message_id that your own "
            "send_message returned", message_id=message_id)
    return message


def status(tx: ReadTxn, session_id: str, message_id: str) -> Receipt:
    return receipt(sent_by(tx, session_id, message_id))


def cancel(tx: WriteTxn, session_id: str, message_id: str) -> Receipt:
    """Discard the caller's own unclaimed mail, reason ``cancelled by sender``."""
    return receipt(_recall(tx, sent_by(tx, session_id, message_id)))


def _recall(tx: WriteTxn, message: Message) -> Message:
    # The seam the checker's planted bug replaces (treemail.models.plants).
    if (message.state, MessageTrigger.CANCEL) not in MESSAGE.transitions:
        raise CancelTooLate(
            f"message {message.message_id} is {message.state.value}: "
            + ("a model request has it, so it can no longer be recalled; ask for its "
               "receipt later to see it consumed" if message.state is MessageState.CLAIMED
               else "it is final and cannot be cancelled"),
            message_id=message.message_id, state=message.state.value)
    return step_message(tx, message, MessageTrigger.CANCEL, reason=CANCELLED, run_id=None)
