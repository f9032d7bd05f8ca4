"""A real daemon answers params that break a bound or an exactly-one-of rule with
``rpc:invalid_params`` (the store unchanged), and the JSON schema of spec/bindings refuses the
same params, so a client validating against the schema learns it before sending."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import RpcFailure
from treemail.protocol import types as t
from treemail.protocol.errors import INVALID_PARAMS
from treemail.protocol.methods import (
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    PLUGIN_PRODUCER_SEND,
    RUN_STEER,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_LIST,
)
from treemail.protocol.rpc_errors import InvalidParams

BINDINGS = Path(__file__).parents[2] / "spec" / "bindings" / "protocol.schema.json"
SID = "00000000-0000-4000-8000-000000000000"

CASES: list[tuple[str, dict[str, Any]]] = [
    (SESSION_CREATE.name, {}),
    (SESSION_CREATE.name, {"agent": "lead", "agent_doc": "---\nname: x\n---\nhi"}),
    (EVENTS_READ.name, {"after": -1}),
    (EVENTS_SUBSCRIBE.name, {"after": -1}),
    (RUN_SUBMIT.name, {"session_id": SID, "text": "  "}),
    (RUN_STEER.name, {"session_id": SID, "text": "hi", "idempotency_key": ""}),
    (PLUGIN_PRODUCER_SEND.name, {"session_id": SID, "body": "\n"}),
    (EVENTS_READ.name, {"limit": 0}),
    (EVENTS_READ.name, {"limit": 257}),
]


def _schema_refuses(method: str, params: dict[str, Any]) -> bool:
    bundle = json.loads(BINDINGS.read_text())
    root = {"$defs": bundle["$defs"], "events": bundle["events"],
            **bundle["methods"][method]["params"]}
    return not jsonschema.Draft202012Validator(root).is_valid(params)


def test_the_daemon_and_the_schema_refuse_the_same_params(daemon: DaemonProcess) -> None:
    async def go() -> list[tuple[str, int, str | None, str]]:
        client = await daemon.client()
        answers = []
        try:
            before = await client.request(SESSION_LIST, t.SessionListParams())
            for method, params in CASES:
                with pytest.raises(RpcFailure) as refused:
                    await client.call_raw(method, params)  # refused on purpose
                failure = refused.value
                answers.append((method, failure.code, failure.data_code, str(failure)))
            # Nothing was created.
            assert await client.request(SESSION_LIST, t.SessionListParams()) == before
        finally:
            await client.close()
        return answers

    answers = run(go())
    for (method, params), (_, code, data_code, text) in zip(CASES, answers, strict=True):
        assert (code, data_code) == (INVALID_PARAMS, InvalidParams.code), (method, text)
        assert _schema_refuses(method, params), (method, params)
    # The message says which rule, so the caller knows what to fix.
    assert "exactly one of agent and agent_doc" in answers[0][3]
    assert "not empty or only whitespace - at `$.text`" in answers[4][3]
    # A bound on both sides is said whole, whichever side was broken.
    assert answers[-2][3].endswith("events.read: Expected `int` from 1 to 256 - at `$.limit`")
    assert answers[-1][3] == answers[-2][3]
