"""Idempotent producer sends on a real daemon: a keyed ``run.submit`` whose answer the client
never read survives ``kill -9``; after the restart, the retry with the same key gets the
first message id, and the mail is delivered exactly once. The same key with other mail is
refused with ``producer:idempotency_conflict``."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.engine import Engine
from treemail.core.errors import InvalidRequest, ProducerKeyConflict
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState
from treemail.protocol import types as t
from treemail.protocol.jsonrpc import encode_request
from treemail.protocol.methods import MESSAGE_GET, MESSAGE_LIST, RUN_SUBMIT, SESSION_CREATE
from treemail.protocol.rpc_errors import InvalidParams

KEY = "3f6c1d0e-8a1b-4c55-9a0e-keyed-submit"


async def _mail(client: DaemonClient, sid: str, text: str) -> list[t.MessageView]:
    listed = await client.request(MESSAGE_LIST, t.MessageListParams(session_id=sid))
    return [m for m in listed.messages if m.body == text]


async def _until_consumed(client: DaemonClient, message_id: str) -> None:
    async with asyncio.timeout(30):
        while (await client.request(MESSAGE_GET, t.MessageGetParams(
                message_id=message_id))).message.state != MessageState.CONSUMED:
            await asyncio.sleep(0.02)


def _log(data: Path, kind: str) -> Counter[str]:
    store = LmdbStore.open(str(data / "store"))
    try:
        return Counter(str(e.data["message_id"]) for _, e in
                       Engine(store, CountingIds()).feed() if e.kind == kind)
    finally:
        store.close()


def test_a_keyed_submit_accepted_before_kill_9_is_answered_again_and_delivered_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = DaemonProcess(data)

    async def before_the_kill() -> tuple[str, str]:
        client = await first.client()
        watcher = await first.client()
        sid = (await client.request(
            SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
        # Sent, and its answer never read: the client is killed with the daemon.
        await client.send_raw(encode_request(999, RUN_SUBMIT.name, {
            "session_id": sid, "text": "keyed mail", "idempotency_key": KEY}))
        async with asyncio.timeout(30):
            while not (found := await _mail(watcher, sid, "keyed mail")):
                await asyncio.sleep(0.02)
        first.kill()
        await client.close()
        await watcher.close()
        return sid, found[0].message_id

    sid, accepted = run(before_the_kill())
    second = DaemonProcess(data)

    async def after_the_restart() -> dict[str, Any]:
        client = await second.client()
        try:
            retried = await client.submit(sid, "keyed mail", idempotency_key=KEY)
            with pytest.raises(RpcFailure) as other_text:
                await client.submit(sid, "other mail", idempotency_key=KEY)
            with pytest.raises(RpcFailure) as other_mode:
                await client.steer(sid, "keyed mail", idempotency_key=KEY)
            await _until_consumed(client, accepted)
            return {"retried": retried, "other_text": other_text.value,
                    "other_mode": other_mode.value,
                    "copies": await _mail(client, sid, "keyed mail"),
                    "others": await _mail(client, sid, "other mail")}
        finally:
            await client.close()

    try:
        r = run(after_the_restart())
    finally:
        code, err = second.terminate()
    assert code == 0, err
    assert r["retried"].message_id == accepted
    for refused in (r["other_text"], r["other_mode"]):
        assert refused.code == -32010 and refused.data_code == ProducerKeyConflict.code
        assert accepted in refused.error.message
    assert [m.message_id for m in r["copies"]] == [accepted] and r["others"] == []
    assert _log(data, EventKind.PRODUCER_MESSAGE_ACCEPTED)[accepted] == 1
    assert _log(data, EventKind.PRODUCER_MESSAGE_CONSUMED)[accepted] == 1


def test_keyed_plugin_mail_and_bad_keys_on_the_wire(daemon: DaemonProcess) -> None:
    async def go() -> dict[str, Any]:
        client = await daemon.client()
        try:
            sid = (await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
            once = await client.producer_send(sid, "plugin note", idempotency_key="p-1")
            twice = await client.producer_send(sid, "plugin note", idempotency_key="p-1")
            # The user's keys are another space: the same key is new user mail.
            user = await client.submit(sid, "plugin note", idempotency_key="p-1")
            with pytest.raises(RpcFailure) as empty_key:
                await client.submit(sid, "hi", idempotency_key="")
            with pytest.raises(RpcFailure) as long_key:
                await client.submit(sid, "hi", idempotency_key="k" * 257)
            # 200 characters, as the schema allows, but 400 bytes: the engine refuses it.
            with pytest.raises(RpcFailure) as wide_key:
                await client.submit(sid, "hi", idempotency_key="\u00e9" * 200)
            return {"once": once, "twice": twice, "user": user, "empty": empty_key.value,
                    "long": long_key.value, "wide": wide_key.value,
                    "copies": await _mail(client, sid, "plugin note"),
                    "hi": await _mail(client, sid, "hi")}
        finally:
            await client.close()

    r = run(go())
    assert r["once"] == r["twice"] and r["once"].owner == "plugin"
    assert r["user"].message_id != r["once"].message_id and r["user"].owner == "user"
    assert len(r["copies"]) == 2
    # Lengths the schema of spec/bindings states are refused as params; bytes, by the engine.
    for refused in (r["empty"], r["long"]):
        assert refused.data_code == InvalidParams.code
        assert "at `$.idempotency_key`" in refused.error.message
    assert r["wide"].data_code == InvalidRequest.code
    assert "idempotency key" in r["wide"].error.message
    assert r["hi"] == []
