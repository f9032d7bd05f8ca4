"""The daemon's JSON-RPC choices, on a real daemon over raw frames (spec/protocol.md, "JSON-RPC
choices"): a notification is executed and never answered; a batch is refused whole with one
error and runs nothing; a request with a null id is refused and not run; two requests with
the same id in flight both run and both are answered with that id."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.daemon.conftest import DaemonProcess, run
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.methods import MESSAGE_LIST, PROTOCOL_VERSION, SESSION_CREATE
from treemail.protocol.rpc_errors import NotJsonRpc, Overloaded

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": m.INITIALIZE.name,
              "params": {"protocol_version": PROTOCOL_VERSION, "client_info": {"name": "raw"}}}


def _line(message: object) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def _exchange(daemon: DaemonProcess, *messages: object) -> list[dict[str, Any]]:
    """Send ``initialize`` and ``messages`` in one write, then end the connection's input:
    the daemon settles everything it runs for this connection, sends what it owes, and
    closes. Every frame it sent, in order; no waiting on time."""
    reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
    try:
        writer.write(_line(INITIALIZE) + b"".join(
            m if isinstance(m, bytes) else _line(m) for m in messages))
        await writer.drain()
        writer.write_eof()
        return [json.loads(line) for line in (await reader.read()).splitlines()]
    finally:
        writer.close()


async def _root(daemon: DaemonProcess) -> str:
    client = await daemon.client()
    try:
        return str((await client.request(
            SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id)
    finally:
        await client.close()


async def _texts(daemon: DaemonProcess, sid: str) -> list[str]:
    client = await daemon.client()
    try:
        listed = await client.request(MESSAGE_LIST, t.MessageListParams(session_id=sid))
        return [m.body for m in listed.messages]
    finally:
        await client.close()


def _submit(sid: str, text: str, **frame: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": m.RUN_SUBMIT.name,
            "params": {"session_id": sid, "text": text}, **frame}


def test_a_notification_is_executed_and_never_answered(daemon: DaemonProcess) -> None:
    async def go() -> tuple[list[dict[str, Any]], list[str]]:
        sid = await _root(daemon)
        frames = await _exchange(
            daemon,
            _submit(sid, "by notification"),
            # Failing notifications are not answered either: JSON-RPC forbids it.
            {"jsonrpc": "2.0", "method": "no.such.method", "params": {}},
            _submit("ffffffff-0000-4000-8000-00000000ffff", "to nobody"),
            _submit(sid, "   "),
        )
        return frames, await _texts(daemon, sid)

    frames, texts = run(go())
    assert [f.get("id") for f in frames] == [0]  # only initialize was answered
    assert frames[0]["result"]["protocol_version"] == PROTOCOL_VERSION
    assert texts == ["by notification"]  # run, and run once


def test_a_notification_before_initialize_is_not_run(daemon: DaemonProcess) -> None:
    async def go() -> tuple[list[bytes], list[str]]:
        sid = await _root(daemon)
        reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
        writer.write(_line(_submit(sid, "too early")))
        writer.write_eof()
        out = (await reader.read()).splitlines()
        writer.close()
        return out, await _texts(daemon, sid)

    out, texts = run(go())
    assert out == [] and texts == []


def test_a_batch_is_refused_whole_with_one_error_and_runs_nothing(
    daemon: DaemonProcess,
) -> None:
    async def go() -> tuple[list[dict[str, Any]], list[str]]:
        sid = await _root(daemon)
        batch = [_submit(sid, "in a batch", id=1), _submit(sid, "also in a batch", id=2)]
        frames = await _exchange(daemon, batch, _submit(sid, "after the batch", id=3))
        return frames, await _texts(daemon, sid)

    frames, texts = run(go())
    # Answers go out as each is ready: a frame refused unread is answered at once.
    assert sorted(str(f["id"]) for f in frames) == ["0", "3", "None"]
    refused = next(f for f in frames if f["id"] is None)["error"]
    assert refused["code"] == -32600 and refused["data"]["code"] == NotJsonRpc.code
    assert "JSON object" in refused["message"]
    assert texts == ["after the batch"]  # the connection goes on; the batch ran nothing


def test_a_null_id_is_refused_and_not_run(daemon: DaemonProcess) -> None:
    async def go() -> tuple[list[dict[str, Any]], list[str]]:
        sid = await _root(daemon)
        frames = await _exchange(daemon, _submit(sid, "null id", id=None))
        return frames, await _texts(daemon, sid)

    frames, texts = run(go())
    assert sorted(str(f["id"]) for f in frames) == ["0", "None"]
    refused = next(f for f in frames if f["id"] is None)["error"]
    assert refused["data"]["code"] == NotJsonRpc.code and "id" in refused["message"]
    assert texts == []


def test_duplicate_ids_in_flight_both_run_and_both_are_answered(daemon: DaemonProcess) -> None:
    async def go() -> tuple[list[dict[str, Any]], list[str]]:
        sid = await _root(daemon)
        frames = await _exchange(daemon, _submit(sid, "first", id=7),
                                 _submit(sid, "second", id=7))
        return frames, await _texts(daemon, sid)

    frames, texts = run(go())
    answers = [f for f in frames if f["id"] == 7]
    assert len(frames) == 3 and len(answers) == 2
    ids = {a["result"]["message_id"] for a in answers}
    assert len(ids) == 2
    assert sorted(texts) == ["first", "second"]


def test_a_notification_over_the_in_flight_cap_is_refused_visibly(
    daemon: DaemonProcess,
) -> None:
    """One write of many notifications: each one either ran (its mail is there) or was
    refused with an overload error (null id, naming the method); none vanishes."""
    async def go() -> tuple[list[dict[str, Any]], list[str], int]:
        sid = await _root(daemon)
        client = await daemon.client()
        limit = client.capabilities.max_in_flight
        await client.close()
        frames = await _exchange(daemon, *(_submit(sid, f"n{i}") for i in range(limit * 4)))
        return frames, await _texts(daemon, sid), limit

    frames, texts, limit = run(go())
    refused = [f["error"] for f in frames if f["id"] is None]
    assert refused and all(e["data"]["code"] == Overloaded.code
                           and e["data"]["details"]["method"] == m.RUN_SUBMIT.name for e in refused)
    assert len(texts) == len(set(texts)) >= limit - 1  # the initialize took one slot
    assert len(texts) + len(refused) == limit * 4
