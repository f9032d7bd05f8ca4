"""``external.call``'s ``accepted``: the mail a bound session's send_message call accepted, as
its sender sees it, read back by the daemon (the helper ``tool.call`` shares); none for a
refused send, which accepted nothing."""

from __future__ import annotations

import json

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.mcp.harness import make_tree
from treemail.core.records import Mode, Owner
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t


def test_an_external_send_answers_with_the_mail_it_accepted(daemon: DaemonProcess) -> None:
    async def go() -> None:
        client = await daemon.client()
        bound = await daemon.client()
        try:
            tree = await make_tree(client)
            a, b = tree.members
            await bound.request(m.EXTERNAL_BIND, x.ExternalBindParams(token=b.token))
            done = await bound.request(m.EXTERNAL_CALL, x.ExternalCallParams(
                tool_call_id="sent-1", name="send_message",
                arguments={"to": a.handle, "body": "hello", "mode": "queue"}))
            assert not done.is_error and done.accepted is not None
            message_id = json.loads(done.content)["message_id"]
            stored = (await client.request(
                m.MESSAGE_GET, t.MessageGetParams(message_id=message_id))).message
            assert done.accepted.message_id == message_id
            assert done.accepted.session_id == a.session_id == stored.recipient
            assert (done.accepted.owner, done.accepted.mode) == (Owner.AGENT, Mode.QUEUE)
            assert done.accepted.agent_hop is not None

            refused = await bound.request(m.EXTERNAL_CALL, x.ExternalCallParams(
                tool_call_id="sent-2", name="send_message",
                arguments={"to": "nobody-here", "body": "lost"}))
            assert refused.is_error and refused.accepted is None
        finally:
            await bound.close()
            await client.close()

    run(go())
