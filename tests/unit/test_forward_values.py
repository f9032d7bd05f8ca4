"""A Python client of this protocol reads an answer of a later one: an enum value it does not
list (a session state, a mail mode added since) decodes to ``Unknown`` carrying its text, and
the rest of the answer as usual; mypy makes a reader handle that case. The answers here come
from a socket server playing a later daemon, since no daemon of this protocol sends such a
value."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.daemon.conftest import run
from tests.unit.typecheck import mypy_errors
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.daemon.errors import AnswerMalformed
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.records import Mode, Owner
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.bindings import schema_bundle
from treemail.protocol.forward import Unknown, tolerant

SID = "00000000-0000-4000-8000-000000000001"
SESSION = {"session_id": SID, "root_session_id": SID, "parent_session_id": None,
           "handle": None, "agent": "lead", "state": "hibernating", "run_id": None,
           "live": True}
MESSAGE = {"message_id": "m-1", "recipient": SID, "sender": None, "owner": "operator",
           "mode": "queue", "state": "consumed", "body": "hi", "run_id": None, "reason": None}


async def _later_daemon(path: Path, results: dict[str, Any]) -> asyncio.Server:
    """Answers each request with ``results[method]``, as a daemon of a later protocol."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            request = json.loads(line)
            answer = {"jsonrpc": "2.0", "id": request["id"],
                      "result": results[request["method"]]}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(serve, path=str(path))


def _ask(tmp_path: Path, results: dict[str, Any]) -> tuple[t.SessionView, t.MessageReceipt]:
    async def go() -> tuple[t.SessionView, t.MessageReceipt]:
        server = await _later_daemon(tmp_path / "later.sock", results)
        client = await DaemonClient.connect(tmp_path / "later.sock", initialize=False)
        try:
            session = await client.request(m.SESSION_GET, t.SessionGetParams(session_id=SID))
            message = await client.request(m.MESSAGE_GET, t.MessageGetParams(message_id="m-1"))
            return session, message
        finally:
            await client.close()
            server.close()

    return run(go())


def test_a_value_of_a_later_protocol_decodes_to_unknown(tmp_path: Path) -> None:
    # The values really are unknown here: decoding strictly refuses them.
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(SESSION, t.SessionView)
    session, got = _ask(tmp_path, {
        "session.get": SESSION, "message.get": {"message": MESSAGE, "history": []}})
    assert session.state == Unknown("hibernating") and str(session.state) == "hibernating"
    assert (session.session_id, session.live) == (SID, True)
    assert got.message.owner == Unknown("operator")
    # Known values beside it are still the enums.
    assert got.message.mode is Mode.QUEUE and got.message.state is MessageState.CONSUMED


def test_known_values_decode_to_their_enums(tmp_path: Path) -> None:
    known = {**SESSION, "state": "running"}
    session, got = _ask(tmp_path, {"session.get": known, "message.get": {
        "message": {**MESSAGE, "owner": "user"}, "history": []}})
    assert session.state is SessionState.RUNNING and got.message.owner is Owner.USER


def test_an_answer_wrong_in_any_other_way_is_still_malformed(tmp_path: Path) -> None:
    wrong = {**SESSION, "state": 3}  # not an enum's text at all
    with pytest.raises(AnswerMalformed):
        _ask(tmp_path, {"session.get": wrong, "message.get": {}})


def test_the_wire_schema_names_the_enum_alone() -> None:
    """``Unknown`` is the Python client's: the bindings show the field as the enum it is."""
    bundle = schema_bundle()
    assert "Unknown" not in bundle["$defs"]
    assert bundle["$defs"]["SessionView"]["properties"]["state"] == {
        "$ref": "#/$defs/SessionState"}


def test_mypy_makes_a_reader_handle_an_unknown_value(tmp_path: Path) -> None:
    head = ("from treemail.core.lifecycle import SessionState\n"
            "from treemail.protocol import types as t\n"
            "def has_run(view: t.SessionView) -> bool:\n")
    errors = mypy_errors(tmp_path, {
        "unhandled": head + "    return view.state.has_run\n",
        "handled": head + "    return isinstance(view.state, SessionState) "
                          "and view.state.has_run\n",
    })
    assert errors["handled"] == []
    assert any('Item "Unknown" of "SessionState | Unknown" has no attribute' in line
               for line in errors["unhandled"]), errors["unhandled"]


def test_every_wire_type_has_a_tolerant_reading() -> None:
    """Each result and notification type compiles its rewrite (no type recurses it for ever),
    and one without an enum-valued field is left as it came."""
    for method in (*m.METHODS.values(), *m.NOTIFICATIONS.values()):
        for kind in (method.params, method.result):
            assert tolerant(kind, {"x": "hibernating"}) is not None
    untouched = {"events": [], "next": 0, "head": 0}
    assert tolerant(t.EventsReadResult, untouched) is untouched
    assert tolerant(t.SessionListResult, {"sessions": [SESSION], "next": None}) == {
        "sessions": [{**SESSION, "state": {"value": "hibernating"}}], "next": None}
