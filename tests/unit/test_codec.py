"""The store's codec reads what the codec before it (json + cattrs) wrote.

The decision: msgspec writes the same JSON document per record (fields by name,
enums by value), so a store written by the earlier codec is read as it is, under the same
format marker, with no migration. ``WRITTEN_BEFORE`` holds bytes that codec wrote for each
kind of value, captured before it was replaced; they must keep decoding to the same records,
both through ``codec.decode`` and through a reopened ``LmdbStore``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treemail.adapters.store.codec import decode, encode, encode_rows
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core import keys
from treemail.core.errors import StoreDamaged
from treemail.core.events import EventKind
from treemail.core.keys import CounterName, Table
from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.core.permissions import Rules
from treemail.core.records import (
    AgentSpec,
    Approval,
    ApprovalState,
    Event,
    IdempotencyKey,
    Message,
    Mode,
    Owner,
    RecipientState,
    Run,
    SendResult,
    Session,
)
from treemail.core.results import CallOutcome

S = "00000001-0000-4000-8000-000000000000"
RULES = Rules.of({"child": "allow", "*": "ask"})
SESSION = Session(S, S, None, AgentSpec("lead", "leads", RULES, Rules.of({"w*": "allow"})),
                  "lead", 1, SessionState.RUNNING, "r1")
RUN = Run("r1", S, 2, RunState.RUNNING, 3, "q1")
MESSAGE = Message("m1", S, "s2", Owner.AGENT, "héllo <b>", Mode.STEER, 2, 7,
                  MessageState.CLAIMED, "r1", "q1", None)
RESULT = SendResult("m1", Mode.QUEUE, RecipientState.WAKING_FINISHED, "d1g")
EVENT = Event(S, 4, EventKind.PRODUCER_MESSAGE_ACCEPTED,
              {"message_id": "m1", "agent_hop": 2, "run_id": None, "nested": [1, {"a": True}]})
APPROVAL = Approval("a1", S, "r1", "t1", "send_message", {"to": "x", "n": 1}, "child",
                    ApprovalState.DENIED, "once", CallOutcome(None, "send:denied", "no"))

# (table, key, the value, the payload json + cattrs wrote for it)
WRITTEN_BEFORE: list[tuple[Table, bytes, object, bytes]] = [
    (Table.SESSIONS, keys.identity(S), SESSION,
     b'{"session_id":"00000001-0000-4000-8000-000000000000","root_session_id":"00000001-0000'
     b'-4000-8000-000000000000","parent_session_id":null,"agent":{"name":"lead","descriptio'
     b'n":"leads","rules":{"rules":[{"pattern":"child","action":"allow"},{"pattern":"*","ac'
     b'tion":"ask"}]},"delegate_rules":{"rules":[{"pattern":"w*","action":"allow"}]}},"hand'
     b'le":"lead","ordinal":1,"state":"running","run_id":"r1","live":true}'),
    (Table.RUNS, b"r1", RUN,
     b'{"run_id":"r1","session_id":"00000001-0000-4000-8000-000000000000","number":2,"statu'
     b's":"running","base_hop":3,"open_request":"q1"}'),
    (Table.MESSAGES, b"m1", MESSAGE,
     b'{"message_id":"m1","recipient":"00000001-0000-4000-8000-000000000000","sender":"s2",'
     b'"owner":"agent","body":"h\xc3\xa9llo <b>","mode":"steer","hop":2,"seq":7,"state":"cl'
     b'aimed","run_id":"r1","request_id":"q1","reason":null}'),
    (Table.REPLAY, keys.replay(IdempotencyKey(S, "r1", "t1")), RESULT,
     b'{"message_id":"m1","mode":"queue","recipient_state":"waking_finished","digest":"d1g"}'),
    (Table.EVENTS, keys.event(S, 4), EVENT,
     b'{"session_id":"00000001-0000-4000-8000-000000000000","seq":4,"kind":"ProducerMessageA'
     b'ccepted","data":{"message_id":"m1","agent_hop":2,"run_id":null,"nested":[1,{"a":true'
     b'}]}}'),
    (Table.APPROVALS, b"a1", APPROVAL,
     b'{"approval_id":"a1","session_id":"00000001-0000-4000-8000-000000000000","run_id":"r1'
     b'","tool_call_id":"t1","tool":"send_message","arguments":{"to":"x","n":1},"label":"ch'
     b'ild","state":"denied","scope":"once","outcome":{"result":null,"error":"send:denied",'
     b'"message":"no"}}'),
    (Table.HANDLES, keys.handle(S, "lead"), S, b'"00000001-0000-4000-8000-000000000000"'),
    (Table.COUNTERS, keys.counter("sessions"), 42, b"42"),
]

# Fields added to a record since its bytes above were captured, with the default that an
# earlier record reads as: the earlier bytes still decode, and now carry them when rewritten.
ADDED_SINCE: dict[Table, dict[str, object]] = {Table.SESSIONS: {"description": ""},
                                               Table.MESSAGES: {"aged": None}}
# Fields added inside a record's nested object since: the session's agent spec.
NESTED_SINCE: dict[Table, dict[str, dict[str, object]]] = {
    Table.SESSIONS: {"agent": {"receipts": False}}}


@pytest.mark.parametrize(("table", "key", "value", "before"), WRITTEN_BEFORE,
                         ids=[row[0].value for row in WRITTEN_BEFORE])
def test_what_the_earlier_codec_wrote_decodes_to_the_same_value(
        table: Table, key: bytes, value: object, before: bytes) -> None:
    kind = keys.VALUE_KINDS[table]
    assert decode(kind, encode(before, key), db=table, key=key) == value
    # And it is the same document the codec writes now, key order and added fields aside.
    expected = json.loads(before)
    if table in ADDED_SINCE:
        expected |= ADDED_SINCE[table]
    for field, added in NESTED_SINCE.get(table, {}).items():
        expected[field] |= added
    assert json.loads(encode(value, key)[:-4]) == expected


def test_a_store_the_earlier_codec_wrote_reads_through_the_port(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path, sync=False)
    for table, key, _, before in WRITTEN_BEFORE:
        store.write_raw(table, key, encode(before, key))
    with store.read() as tx:
        assert tx.session(S) == SESSION
        assert tx.run("r1") == RUN
        assert tx.message("m1") == MESSAGE
        assert tx.recall(IdempotencyKey(S, "r1", "t1")) == RESULT
        assert list(tx.events(S, after=3)) == [EVENT]
        assert tx.approval("a1") == APPROVAL
        assert tx.handle_owner(S, "lead") == S
        assert tx.count(CounterName("sessions")) == 42
    # The store keeps working on those records.
    assert store.transact(lambda tx: tx.add(CounterName("sessions"), 1)) == 43
    store.close()


@pytest.mark.parametrize(("payload", "reason"), [
    (b'{"run_id":"r1","session_id":"s","number":true}', r"Expected `int`, got `bool`"),
    (b'{"run_id":"r1","session_id":"s","number":1,"status":"lost"}', "Invalid enum value"),
    (b'{"run_id":"r1","session_id":"s"}', "missing required field `number`"),
    (b'{"run_id":5,"session_id":"s","number":1}', r"\$\.run_id"),
])
def test_decoding_is_strict_and_names_the_record(payload: bytes, reason: str) -> None:
    with pytest.raises(StoreDamaged, match=reason) as caught:
        decode(Run, encode(payload, b"r1"), db="runs", key=b"r1")
    assert "a Run in database 'runs' at key b'r1'" in caught.value.message


def test_a_flush_encodes_each_row_as_encode_does() -> None:
    """``encode_rows`` encodes a flush's records in one encoder call, as JSON lines, and
    splits them at their newlines: each row's bytes are still ``encode``'s, newlines and
    other control characters inside strings, raw bytes holding a newline, and deletes
    among them."""
    odd = Message("m\n2", S, None, Owner.USER, "line\nnext\r\x00\u2028 \U0001f600", Mode.QUEUE,
                  0, 1)
    rows: list[tuple[bytes, bytes, object]] = [
        (b"w" + bytes([n]), key, value) for n, (_, key, value, _) in enumerate(WRITTEN_BEFORE)]
    rows += [(b"odd", b"m\n2", odd), (b"raw", b"f\n", b"\x00\n\xff\n"), (b"gone", b"k", None),
             (b"text", b"t", "a\nb"), (b"number", b"n", 7)]
    assert encode_rows(rows) == [
        (where, None if value is None else encode(value, key)) for where, key, value in rows]
    assert encode_rows(rows[-1:]) == [(b"number", encode(7, b"n"))]
    assert encode_rows([]) == []
