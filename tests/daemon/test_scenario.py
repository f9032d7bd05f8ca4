"""Protocol 19 end to end, on a daemon whose echo model holds each run in flight for a
moment (``[daemon.scripted] delay``): a tree of 4 sessions, both modes, a wake, an approval
answered over the wire, a user steer, receipts, plugins, and subscriptions replayed and then
followed live with the seam checked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.daemon.conftest import DaemonProcess, call_as_run, in_flight, quiet, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.core.envelope import render_envelope
from treemail.core.errors import (
    ApprovalRequired,
    InvalidToolContext,
    PluginBodyTooLarge,
    PluginRefusal,
    UnknownTarget,
)
from treemail.core.events import EventKind
from treemail.core.lifecycle import ApprovalState, MessageState, SessionState
from treemail.core.records import RecipientState
from treemail.protocol import types as t
from treemail.protocol.methods import (
    APPROVAL_ANSWER,
    APPROVAL_LIST,
    EVENTS_EVENT,
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    EVENTS_UNSUBSCRIBE,
    MESSAGE_GET,
    MESSAGE_LIST,
    PLUGIN_EVENT,
    PLUGIN_PRODUCER_SEND,
    PLUGIN_TOOL_BEFORE_CALL,
    RUN_LIST,
    RUN_STEER,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_DELEGATE,
    SESSION_GET,
    SESSION_LIST,
    TOOL_CALL,
)

WORKER = """---
name: worker
description: Does a part of the task
permissions:
  message:
    parent: allow
    sibling: ask
---
You work.
"""

LEAD = """---
name: lead
description: Plans and delegates
permissions:
  message:
    child: allow
---
You lead.
"""


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    data = tmp_path_factory.mktemp("slow")
    (data / "agents").mkdir()
    (data / "agents" / "worker.md").write_text(WORKER)
    # The echo model only notes what it read: this scenario drives every send itself.
    (data / "config.toml").write_text('[daemon]\nmodel = "echo"\n[daemon.scripted]\n'
                                      'delay = 0.6\n')
    process = DaemonProcess(data)
    yield process
    code, err = process.terminate()
    assert code == 0, err


def test_a_tree_of_four_with_both_modes_a_wake_an_approval_and_a_steer(
    slow: DaemonProcess,
) -> None:
    async def go() -> dict[str, Any]:
        client = await slow.client()
        try:
            lead = await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=LEAD))
            lid = lead.session_id
            kids = [await client.request(SESSION_DELEGATE, t.SessionDelegateParams(
                parent_session_id=lid, agent="worker", task=f"part {i}"))
                for i in range(2)]
            grandchild = await client.request(SESSION_DELEGATE, t.SessionDelegateParams(
                parent_session_id=kids[0].session_id, agent="worker", task="a detail"))
            tree = await client.request(SESSION_LIST, t.SessionListParams(root_session_id=lid))
            a, b = (k.session_id for k in kids)
            # User steer into a run in flight: a is running its delegated task. Only the
            # model's delay holds it in flight, so under load it may end before the steer
            # arrives: that steer queues and wakes a, and the next run is steered instead.
            for _ in range(20):
                await in_flight(client, a, fresh=False)
                steer = await client.request(
                    RUN_STEER, t.RunSteerParams(session_id=a, text="also check X"))
                if steer.recipient_state == RecipientState.RUNNING:
                    break
            # As a's run: a message to its sibling waits for the user (ask rule).
            call = await call_as_run(client, a, "t1", {"to": b, "body": "hello sibling"},
                                     fresh=False)
            held = await client.request(APPROVAL_LIST, t.ApprovalListParams())
            assert call.approval_id is not None
            answered = await client.request(APPROVAL_ANSWER, t.ApprovalAnswerParams(
                approval_id=call.approval_id, approve=True, scope="once"))
            await quiet(client)
            # Wake: b finished; user input wakes it.
            finished = await client.request(SESSION_GET, t.SessionGetParams(session_id=b))
            woken = await client.request(
                RUN_SUBMIT, t.RunSubmitParams(session_id=b, text="one more"))
            queued = await client.request(
                RUN_STEER, t.RunSteerParams(session_id=lid, text="idle steer"))
            await quiet(client)
            receipt = await client.request(
                MESSAGE_GET, t.MessageGetParams(message_id=steer.message_id))
            b_mail = await client.request(MESSAGE_LIST, t.MessageListParams(session_id=b))
            b_runs = await client.request(RUN_LIST, t.RunListParams(session_id=b))
            return dict(tree=tree, steer=steer, call=call, held=held, answered=answered,
                        finished=finished, woken=woken, queued=queued, receipt=receipt,
                        b_mail=b_mail, b_runs=b_runs, grandchild=grandchild)
        finally:
            await client.close()

    r = run(go(), timeout=90)
    assert len(r["tree"].sessions) == 4
    assert r["grandchild"].parent_session_id == r["tree"].sessions[1].session_id
    assert r["steer"].mode == "steer" and r["steer"].recipient_state == RecipientState.RUNNING
    assert r["steer"].owner == "user" and r["steer"].agent_hop is None
    assert r["call"].approval_id and ApprovalRequired.code in r["call"].content
    assert [h.approval_id for h in r["held"].approvals] == [r["call"].approval_id]
    assert r["answered"].state == ApprovalState.APPROVED and r["answered"].scope == "once"
    outcome = r["answered"].outcome  # an object, the ApprovalAnswered event's shape
    assert outcome is not None and outcome.result is not None, outcome
    assert "message_id" in outcome.result and outcome.error is None, outcome
    assert r["finished"].state == SessionState.FINISHED
    assert r["woken"].recipient_state == RecipientState.WAKING_FINISHED
    assert r["woken"].mode == "queue"
    assert r["queued"].mode == "queue"  # a steer to a session with no run waits for one
    kinds = [h.kind for h in r["receipt"].history]
    assert r["receipt"].message.state == MessageState.CONSUMED
    assert kinds[0] == EventKind.PRODUCER_MESSAGE_ACCEPTED
    assert kinds[-1] == EventKind.PRODUCER_MESSAGE_CONSUMED
    owners = sorted(m.owner for m in r["b_mail"].messages)
    assert owners == ["agent", "delegation", "user"]  # the approved sibling mail arrived
    assert all(m.state == MessageState.CONSUMED for m in r["b_mail"].messages)
    assert len(r["b_runs"].runs) >= 2  # its task, then the wake


async def _log(client: DaemonClient, sid: str) -> list[t.EventView]:
    page = await client.request(EVENTS_READ, t.EventsReadParams(after=0, session_id=sid, limit=256))
    return page.events


def test_agent_hop_is_on_the_wire_and_in_the_log_but_never_in_the_envelope(
    slow: DaemonProcess,
) -> None:
    body = "the parser breaks on nested quotes"

    async def go() -> dict[str, Any]:
        client = await slow.client()
        try:
            lead = await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=LEAD))
            lid = lead.session_id
            sub = await client.request(
                EVENTS_SUBSCRIBE, t.EventsSubscribeParams(after=0, session_id=lid))
            child = await client.request(SESSION_DELEGATE, t.SessionDelegateParams(
                parent_session_id=lid, agent="worker", task="find the bug"))
            call = await call_as_run(client, child.session_id, "hop-1",
                                     {"to": lid, "body": body}, fresh=False)
            user = await client.request(
                RUN_SUBMIT, t.RunSubmitParams(session_id=lid, text="status?"))
            await quiet(client)
            assert call.accepted is not None, call.content
            sent = call.accepted.message_id
            # Streamed until the mail's own acceptance: a run of the lead may come first
            # (the child's result, when its first run ended before the call reached it).
            live: list[t.EventNotification] = []
            while not any(n.event.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                          and n.event.data["message_id"] == sent for n in live):
                note = await client.next_notification(EVENTS_EVENT)
                if note.subscription_id == sub.subscription_id:
                    live.append(note)
            return dict(call=call, user=user, child=child, live=live,
                        log=await _log(client, lid))
        finally:
            await client.close()

    r = run(go(), timeout=90)
    accepted = r["call"].accepted
    message_id = accepted.message_id
    assert accepted.owner == "agent" and isinstance(accepted.agent_hop, int)
    assert accepted.agent_hop >= 1
    assert "agent_hop" not in r["call"].content  # the sending model's tool result
    assert r["user"].agent_hop is None  # user mail has no hop
    # The durable event, read back and streamed live, carries the same hop.
    accepts = {v.data["message_id"]: v.data for v in r["log"]
               if v.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED}
    assert accepts[message_id]["agent_hop"] == accepted.agent_hop
    assert accepts[r["user"].message_id]["agent_hop"] is None
    streamed = [n.event.data for n in r["live"]
                if n.event.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                and n.event.data["message_id"] == message_id]
    assert [d["agent_hop"] for d in streamed] == [accepted.agent_hop]
    # What the lead's model read for that mail: the envelope alone, no hop, no id.
    begun = next(v.data for v in r["log"] if v.kind == EventKind.REQUEST_BEGUN
                 and message_id in v.data["message_ids"])
    output = next(v.data for v in r["log"] if v.kind == EventKind.MODEL_OUTPUT
                  and v.data["request_id"] == begun["request_id"])
    envelope = next(text for text in output["inputs"] if body in text)
    assert envelope == render_envelope(r["child"].handle, body, reply_hint=True)
    assert "hop" not in envelope and message_id not in envelope


def test_tool_call_needs_a_run_in_flight(slow: DaemonProcess) -> None:
    async def go() -> RpcFailure:
        client = await slow.client()
        try:
            root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="worker"))
            with pytest.raises(RpcFailure) as caught:
                await client.request(TOOL_CALL, t.ToolCallParams(
                    session_id=root.session_id, tool_call_id="x", name="send_message",
                    arguments={"to": "a", "body": "b"}))
            return caught.value
        finally:
            await client.close()

    failure = run(go())
    assert failure.data_code == InvalidToolContext.code


def test_plugin_mail_is_capped_and_the_gate_decides_over_the_wire(slow: DaemonProcess) -> None:
    async def go() -> tuple[t.ProducerAccepted, RpcFailure, t.ToolCallResult,
                            list[t.ToolGateParams], list[str]]:
        plugin = await slow.client(tool_gate=True, plugin_events=True)
        asked: list[t.ToolGateParams] = []

        async def gate(params: t.ToolGateParams) -> t.ToolGateResult:
            asked.append(params)
            return t.ToolGateResult(allow=False, reason="audit says no")

        plugin.serve(PLUGIN_TOOL_BEFORE_CALL, gate)
        user = await slow.client()
        try:
            root = await user.request(SESSION_CREATE, t.SessionCreateParams(agent="worker"))
            sid = root.session_id
            accepted = await plugin.request(PLUGIN_PRODUCER_SEND, t.ProducerSendParams(
                session_id=sid, body="from a plugin"))
            with pytest.raises(RpcFailure) as too_big:
                await plugin.request(PLUGIN_PRODUCER_SEND, t.ProducerSendParams(
                    session_id=sid, body="x" * (256 * 1024 + 1)))
            refused = await call_as_run(user, sid, "g1", {"to": "nobody", "body": "hi"},
                                        fresh=False)
            seen: list[str] = []
            while EventKind.PRODUCER_MESSAGE_ACCEPTED not in seen:
                note = await plugin.next_notification(PLUGIN_EVENT)
                seen.append(note.event.kind)
            return accepted, too_big.value, refused, asked, seen
        finally:
            await plugin.close()
            await user.close()

    accepted, too_big, refused, asked, seen = run(go())
    assert accepted.owner == "plugin"
    assert too_big.code == -32010 and too_big.data_code == PluginBodyTooLarge.code
    assert PluginRefusal.code in refused.content and "audit says no" in refused.content
    assert len(asked) == 1  # one plugin/tool_before_call, decoded into its params type
    assert asked[0].name == "send_message" and asked[0].tool_call_id == "g1"
    assert EventKind.SESSION_CREATED in seen


def test_a_gate_answer_that_is_not_a_verdict_refuses_the_call(slow: DaemonProcess) -> None:
    """The daemon decodes a gate's answer as a ``ToolGateResult``: an answer of another shape
    (here a plugin that answers with the wrong object) refuses the call and says why."""
    async def go() -> t.ToolCallResult:
        plugin = await slow.client(tool_gate=True)

        async def confused(params: t.ToolGateParams) -> t.ToolGateResult:
            # A misbehaving plugin: the cast hides the wrong answer from the type checker.
            return cast(t.ToolGateResult, t.ShutdownResult(shutting_down=True))

        plugin.serve(PLUGIN_TOOL_BEFORE_CALL, confused)
        user = await slow.client()
        try:
            sid = (await user.request(SESSION_CREATE, t.SessionCreateParams(
                agent="worker"))).session_id
            # A run in flight, for the call to run as.
            return await call_as_run(user, sid, "g2", {"to": "nobody", "body": "hi"})
        finally:
            await plugin.close()
            await user.close()

    refused = run(go())
    assert PluginRefusal.code in refused.content and "not a verdict" in refused.content
    assert "shutting_down" in refused.content  # the decode error names what was wrong
    assert refused.accepted is None and refused.approval_id is None


def test_subscribe_replays_then_follows_live_with_no_gap_and_no_duplicate(
    slow: DaemonProcess,
) -> None:
    async def traffic(client: DaemonClient, sid: str, n: int) -> None:
        for i in range(n):
            await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text=f"t{i}"))

    async def go() -> tuple[list[int], list[int], int]:
        writer, reader = await slow.client(), await slow.client()
        try:
            root = await writer.request(SESSION_CREATE, t.SessionCreateParams(agent="worker"))
            sid = root.session_id
            await traffic(writer, sid, 5)
            busy = asyncio.create_task(traffic(writer, sid, 40))  # during the subscribe
            await asyncio.sleep(0.05)
            sub = await reader.request(EVENTS_SUBSCRIBE, t.EventsSubscribeParams(after=0))
            await busy
            await quiet(writer)
            head = (await writer.request(EVENTS_SUBSCRIBE, t.EventsSubscribeParams(after=0))).head
            numbers: list[int] = []
            while not numbers or numbers[-1] < head:
                note = await reader.next_notification(EVENTS_EVENT)
                assert note.subscription_id == sub.subscription_id
                numbers.append(note.event.number)
            await reader.request(EVENTS_UNSUBSCRIBE, t.EventsUnsubscribeParams(
                subscription_id=sub.subscription_id))
            one = await reader.request(EVENTS_SUBSCRIBE, t.EventsSubscribeParams(
                after=0, session_id=sid))
            mine: list[int] = []
            while not mine or mine[-1] < head:
                note = await reader.next_notification(EVENTS_EVENT)
                if note.subscription_id == one.subscription_id:
                    assert note.event.session_id == sid
                    mine.append(note.event.number)
            return numbers, mine, sub.head
        finally:
            await writer.close()
            await reader.close()

    numbers, mine, head_at_subscribe = run(go(), timeout=120)
    # The feed is numbered 1, 2, ...: every number once, in order, across the seam.
    assert numbers == list(range(1, numbers[-1] + 1))
    assert 0 < head_at_subscribe < numbers[-1]  # part replayed, part live
    assert mine == sorted(set(mine)) and set(mine) <= set(numbers)


def test_unsubscribe_of_an_unknown_subscription_is_an_error(slow: DaemonProcess) -> None:
    async def go() -> RpcFailure:
        client = await slow.client()
        try:
            with pytest.raises(RpcFailure) as caught:
                await client.request(
                    EVENTS_UNSUBSCRIBE, t.EventsUnsubscribeParams(subscription_id="sub-999"))
            return caught.value
        finally:
            await client.close()

    assert run(go()).data_code == UnknownTarget.code


def test_kill_9_mid_traffic_then_restart_delivers_every_acked_send_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    daemon = DaemonProcess(data)
    acked: list[str] = []

    async def traffic() -> None:
        client = await daemon.client()
        root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
        try:
            for i in range(400):
                accepted = await client.request(
                    RUN_SUBMIT, t.RunSubmitParams(session_id=root.session_id, text=f"{i}"))
                acked.append(accepted.message_id)
                if i == 30:
                    daemon.kill()  # SIGKILL while sends are flowing
        except (ConnectionError, RpcFailure):
            pass

    run(traffic())
    assert len(acked) >= 30
    again = DaemonProcess(data)

    async def settle() -> list[t.MessageView]:
        client = await again.client()
        try:
            await quiet(client)
            sessions = await client.every(SESSION_LIST, t.SessionListParams())
            return [m for s in sessions for m in
                    await client.every(MESSAGE_LIST, t.MessageListParams(session_id=s.session_id))]
        finally:
            await client.close()

    try:
        messages = run(settle())
    finally:
        code, err = again.terminate()
    assert code == 0, err
    by_id = {m.message_id: m for m in messages}
    assert set(acked) <= set(by_id)
    assert all(by_id[i].state == MessageState.CONSUMED for i in acked)
    _consumed_once(data, acked)


def _consumed_once(data: Path, acked: list[str]) -> None:
    from collections import Counter

    from treemail.adapters.store.lmdb_store import LmdbStore
    from treemail.core.engine import Engine
    from treemail.core.ids import CountingIds

    store = LmdbStore.open(str(data / "store"))
    try:
        consumed = Counter(str(e.data["message_id"]) for _, e in
                           Engine(store, CountingIds()).feed()
                           if e.kind == EventKind.PRODUCER_MESSAGE_CONSUMED)
    finally:
        store.close()
    assert all(consumed[i] == 1 for i in acked)
