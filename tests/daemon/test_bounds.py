"""What one peer can make the daemon hold, and how long it can make others wait: a gate that
stopped reading, pipelined requests with large answers, an answer that cannot be encoded,
and subscriptions, each against a real daemon (a subprocess, or in-process over its socket
where the test counts the daemon's own store reads)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench.bounds import PIPELINED, pipelined_lists
from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.host import open_daemon
from treemail.core.errors import PluginFailed
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import (
    APPROVAL_LIST,
    EVENTS_EVENT,
    EVENTS_SUBSCRIBE,
    EVENTS_UNSUBSCRIBE,
    INITIALIZE,
    PLUGIN_PRODUCER_SEND,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_GET,
    SESSION_LIST,
    TOOL_CALL,
)
from treemail.protocol.rpc_errors import AnswerFailed, TooManySubscriptions

MiB = 1 << 20


WORKER = """---
name: worker
description: Sends mail
permissions:
  message:
    "*": allow
---
You work.
"""


def _daemon(data: Path, config: str, **kwargs: Any) -> DaemonProcess:
    (data / "agents").mkdir(parents=True)
    (data / "agents" / "worker.md").write_text(WORKER)
    (data / "config.toml").write_text(config)
    return DaemonProcess(data, **kwargs)


async def _raw(socket: Path, frames: list[dict[str, Any]], limit: int = 64 * MiB,
               ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that reads only when told to: its stream stops taking bytes from the socket
    once it buffers twice ``limit``."""
    reader, writer = await asyncio.open_unix_connection(str(socket), limit=limit)
    writer.write(b"".join(json.dumps({"jsonrpc": "2.0", **f}).encode() + b"\n"
                          for f in frames))
    await writer.drain()
    return reader, writer


def _initialize(name: str, **capabilities: bool) -> dict[str, Any]:
    return {"id": 0, "method": INITIALIZE.name, "params": {
        "protocol_version": 19, "client_info": {"name": name}, "capabilities": capabilities}}


async def _running(client: DaemonClient, sid: str) -> None:
    while (await client.request(
        SESSION_GET, t.SessionGetParams(session_id=sid))).state != SessionState.RUNNING:
        await asyncio.sleep(0.02)


def test_a_gate_that_stopped_reading_fails_each_tool_call_in_time(tmp_path: Path) -> None:
    """Its queue full of plugin events, the gate cannot even be asked: each agent's tool
    call is answered plugin:failed once the gate's timeout passes, none waits for ever, and
    the daemon serves everyone else meanwhile."""
    daemon = _daemon(tmp_path / "data", '[daemon]\nmodel = "echo"\n[daemon.scripted]\n'
                     'delay = 600\n[daemon.limits]\npeer_timeout = 1\n'
                     'max_held_bytes = 1048576\n')

    async def go() -> tuple[list[Any], Any]:
        gate_reader, gate = await _raw(daemon.socket, [_initialize(
            "stalled gate", tool_gate=True, plugin_events=True)], limit=64 * 1024)
        await gate_reader.readline()  # initialized; from now on it reads nothing
        user = await daemon.client()
        try:
            sink = (await user.request(SESSION_CREATE, t.SessionCreateParams(
                agent="default"))).session_id
            for batch in range(8):  # 400 events of 8 KiB: past its budget (and its queue)
                answers = await user.request_many(PLUGIN_PRODUCER_SEND, [
                    t.ProducerSendParams(session_id=sink, body=f"{batch}-{i} " + "x" * 8192)
                    for i in range(50)])
                assert all(isinstance(a, t.ProducerAccepted) for a in answers), answers
            agents = [(await user.request(SESSION_CREATE, t.SessionCreateParams(
                agent="worker"))).session_id
                      for _ in range(2)]
            for sid in agents:
                await user.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="work"))
                await _running(user, sid)
            calls = [user.request(TOOL_CALL, t.ToolCallParams(
                session_id=sid, tool_call_id=f"t{n}", name="send_message",
                arguments={"to": "nobody", "body": "hi"})) for n, sid in enumerate(agents)]
            listed = await user.request(SESSION_LIST, t.SessionListParams())
            return list(await asyncio.gather(*calls)), listed
        finally:
            gate.close()
            await user.close()

    try:
        answers, listed = run(go(), 120)
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert len(listed.sessions) == 3
    for answer in answers:
        assert PluginFailed.code in answer.content, answer
        assert "did not answer" in answer.content


def test_sixty_pipelined_large_answers_keep_the_daemon_small(tmp_path: Path) -> None:
    """60 message.list of a 6 MiB session, pipelined in one write: every one is answered,
    and the daemon's peak RSS grows by less than 200 MiB (it grew by over 1 GiB when answers
    were bounded in frames: 60 answers built and queued at once)."""
    daemon = _daemon(tmp_path / "data", '[daemon]\nmodel = "echo"\n')

    async def go() -> tuple[int, int, list[dict[str, Any]]]:
        return await pipelined_lists(daemon.socket, daemon.proc.pid)

    try:
        before, peak, answers = run(go(), 240)
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert PIPELINED == 60 and sorted(a["id"] for a in answers) == list(range(61))
    # Each answer is the same first page (pages stop near 1 MiB of bodies), and not empty.
    pages = [[m["message_id"] for m in a["result"]["messages"]] for a in answers if a["id"]]
    assert pages[0] and all(page == pages[0] for page in pages), pages
    assert peak - before < 200 * MiB, (before // MiB, peak // MiB)


def test_an_answer_that_cannot_be_encoded_is_still_answered(tmp_path: Path) -> None:
    """The encoder fails (MemoryError) on approval.list's answers: the request gets a typed
    error, and the connection goes on serving the requests after it."""
    data = tmp_path / "data"
    data.mkdir()
    daemon = DaemonProcess(data, program=(str(Path(__file__).with_name("unencodable.py")),))

    async def go() -> tuple[RpcFailure, t.SessionView]:
        client = await daemon.client()
        try:
            with pytest.raises(RpcFailure) as failed:
                await client.request(APPROVAL_LIST, t.ApprovalListParams())
            return failed.value, await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))
        finally:
            await client.close()

    try:
        failure, created = run(go())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert failure.code == -32603 and failure.data_code == AnswerFailed.code
    assert APPROVAL_LIST.name in str(failure) and "MemoryError" in str(failure)
    assert created.session_id


def test_subscriptions_past_the_cap_are_refused_until_one_ends(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path / "data", "[daemon.limits]\nmax_subscriptions = 8\n")

    async def go() -> tuple[list[Any], Any]:
        client = await daemon.client()
        try:
            sid = (await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
            # Pipelined, and to one session: each waits on the store before it is counted.
            answers = await client.request_many(
                EVENTS_SUBSCRIBE, [t.EventsSubscribeParams(after=0, session_id=sid)] * 11)
            first = answers[0]
            assert isinstance(first, t.EventsSubscribeResult), first
            await client.request(EVENTS_UNSUBSCRIBE, t.EventsUnsubscribeParams(
                subscription_id=first.subscription_id))
            return answers, await client.request(EVENTS_SUBSCRIBE, t.EventsSubscribeParams(after=0))
        finally:
            await client.close()

    try:
        answers, again = run(go())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert all(isinstance(a, t.EventsSubscribeResult) for a in answers[:8])
    for refused in answers[8:]:
        assert isinstance(refused, RpcFailure)
        assert refused.code == -32001 and refused.data_code == TooManySubscriptions.code
        assert "unsubscribe" in str(refused)
    assert again.subscription_id


async def _idle_subscriptions(data: Path, socket: Path) -> tuple[int, int, list[str]]:
    daemon = await open_daemon(data, socket, Limits())
    subs = daemon.subscriptions
    try:
        idle_client = await DaemonClient.connect(socket, name=SessionState.IDLE)
        user = await DaemonClient.connect(socket, name="user")
        idle = (await user.request(SESSION_CREATE, t.SessionCreateParams(
            agent="default"))).session_id
        busy = (await user.request(SESSION_CREATE, t.SessionCreateParams(
            agent="default"))).session_id
        for _ in range(20):  # under the in-flight cap, 1,000 in all
            answers = await idle_client.request_many(
                EVENTS_SUBSCRIBE, [t.EventsSubscribeParams(after=0, session_id=idle)] * 50)
            assert all(isinstance(a, t.EventsSubscribeResult) for a in answers), answers
        live = await user.request(EVENTS_SUBSCRIBE, t.EventsSubscribeParams(
            after=0, session_id=busy))
        while subs.parked < 1001:  # every pump has caught up and sleeps
            await asyncio.sleep(0.01)
        reads = subs.reads
        await user.request(RUN_SUBMIT, t.RunSubmitParams(session_id=busy, text="one message"))
        kinds: list[str] = []
        while EventKind.RUN_FINISHED not in kinds:
            note = await user.next_notification(EVENTS_EVENT)
            assert note.subscription_id == live.subscription_id
            kinds.append(note.event.kind)
        while subs.parked < 1001:
            await asyncio.sleep(0.01)
        await idle_client.close()
        await user.close()
        return reads, subs.reads, kinds
    finally:
        daemon.request_stop()
        await daemon.stopped.wait()


def test_idle_subscriptions_cost_no_store_read(tmp_path: Path) -> None:
    """1,000 subscriptions to an idle session, and one to a session that runs: during the
    run no pump reads the store (none polls, and the live one takes the new events from
    the feed signal's memory), and the live one still sees the whole run."""
    before, after, kinds = run(_idle_subscriptions(tmp_path / "data",
                                                   tmp_path / "data" / "daemon.sock"), 120)
    assert kinds[0] != EventKind.RUN_FINISHED and EventKind.RUN_STARTED in kinds
    assert after == before
