"""``message.status`` and ``message.cancel``: a sender's receipts and recall, for the user's
connection, acting as the sender session it names (``treemail.core.receipts`` decides; a
bound external connection reaches the same operations through its tools).

A cancel runs on the writer thread like every write, so it and a claim of the same mail are
ordered: one of them wins whole, and the loser's answer says so (``receipt:too_late`` for a
cancel that came second; a request that came second never sees the cancelled mail).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from treemail.adapters.daemon.connection import Connection
from treemail.adapters.daemon.routes import ROUTES
from treemail.core.receipts import Receipt
from treemail.protocol import methods as m
from treemail.protocol import receipts as rc

if TYPE_CHECKING:
    from treemail.adapters.daemon.server import Daemon

__all__ = ["Receipts", "status_view"]

handles = ROUTES.handles


def status_view(receipt: Receipt) -> rc.SentMessageStatus:
    return rc.SentMessageStatus(
        message_id=receipt.message_id, recipient_session_id=receipt.recipient,
        state=receipt.state.value, final=receipt.final, reason=receipt.reason)


class Receipts:
    def __init__(self, daemon: Daemon) -> None:
        self.rt = daemon.runtime
        self.engine = daemon.runtime.engine

    @handles(m.MESSAGE_STATUS)
    async def status(self, conn: Connection, p: rc.SentMessageParams) -> rc.SentMessageStatus:
        receipt: Receipt = await self.rt.writer.quiet(self.engine.message_status,
                                                      p.session_id, p.message_id)
        return status_view(receipt)

    @handles(m.MESSAGE_CANCEL)
    async def cancel(self, conn: Connection, p: rc.SentMessageParams) -> rc.SentMessageStatus:
        receipt: Receipt = await self.rt.writer(self.engine.cancel_message,
                                                p.session_id, p.message_id)
        return status_view(receipt)
