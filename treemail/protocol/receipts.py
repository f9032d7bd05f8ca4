"""Protocol 19's wire types for a sender's receipts and recall of its own agent mail.

``message.status`` and ``message.cancel`` act as a sender session the user's connection
names (a bound external connection reaches the same operations as its ``message_status``
and ``cancel_message`` tools, always as its own session). Only the sender's own agent mail
answers: any other id, whether it names nothing or another session's mail, is refused alike
with ``receipt:unknown_message``. A cancel that finds the mail claimed (or final) is refused
with ``receipt:too_late``, its ``data.details.state`` saying which; nothing changes then.
"""

from __future__ import annotations

from treemail.protocol.structs import Params, Result

__all__ = ["SentMessageParams", "SentMessageStatus"]


class SentMessageParams(Params):
    """The sender asking (``session_id``) and the ``message_id`` its send_message returned."""

    session_id: str
    message_id: str


class SentMessageStatus(Result):
    """A sent message as its sender sees it: ``state`` is its lifecycle state, ``final`` once
    consumed or discarded; ``reason`` only for a discard (``cancelled by sender``,
    ``expired``, or an operator's)."""

    message_id: str
    recipient_session_id: str
    state: str
    final: bool
    reason: str | None = None
