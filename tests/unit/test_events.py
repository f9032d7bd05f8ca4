"""The typed event log: every writer's entry reads back as its payload and fits its published
schema, and entries this version cannot read become ``UnknownEvent``s, never exceptions."""

from __future__ import annotations

from collections.abc import Mapping

import jsonschema
import pytest

from treemail.core import events, external, owners
from treemail.core.events import EventKind, Reply, UnknownEvent
from treemail.core.lifecycle import MessageState, SessionTrigger
from treemail.core.records import Event, Message, Mode, Owner, Run
from treemail.core.shapes import shape
from treemail.core.store import Store

from .conftest import World


def _busy_log(world: World) -> list[Event]:
    """A log with every kind a run, a delegation, a fork, a revert and an approval write."""
    root = world.root("root", {"*": "allow", "sibling": "ask"})
    kid = world.child(root, "kid", {"*": "allow"})
    world.send(root, kid, "steer this", "steer")
    world.drain(kid)
    run = world.activate(kid)
    request = world.engine.begin_request(kid.session_id, run.run_id)
    world.engine.commit_request(kid.session_id, run.run_id, request.request_id, Reply(
        ("read",), None, (events.RecordedCall("c1", "send_message", "{}"),)))
    world.engine.record_tool_results(kid.session_id, run.run_id,
                                     [events.RecordedResult("c1", "sent")])
    world.engine.finish_run(kid.session_id, run.run_id, "the result")
    ctx = world.ctx(root)
    held = world.engine.hold_for_approval(ctx, "send_message", {"to": kid.reference}, "child")
    world.engine.answer_approval(held.approval_id, approve=False)
    message = world.engine.accept(kid.session_id, "to drop", Owner.PLUGIN)
    world.engine.discard(message, "operator")
    world.engine.cancel_run(root.session_id, ctx.run_id, "stop")
    world.engine.fork(kid.session_id)
    _, token = world.engine.attach(root.session_id, kid.agent, "s" * 43)  # an external one
    world.engine.store.transact(lambda tx: external.revoke(
        tx, external.digest(token)[:external.TOKEN_ID_DIGITS]))
    world.engine.revert(kid.session_id)
    return [event for _, event in world.engine.feed()]


def test_every_written_entry_reads_back_and_fits_its_schema(world: World) -> None:
    log = _busy_log(world)
    schemas = events.schemas()
    seen = set()
    for event in log:
        payload = events.read(event)
        assert not isinstance(payload, UnknownEvent), payload
        assert event.kind == payload.KIND
        assert events.encode(payload) == dict(event.data)  # nothing lost or added
        # record's encoder per class stores what the payload's shape encodes, in key order
        assert list(events.encode(payload).items()) == list(shape(type(payload)).encode(
            payload).items())
        jsonschema.validate(dict(event.data), schemas[event.kind])
        seen.add(event.kind)
    assert seen == set(EventKind) - {EventKind.REQUEST_ABORTED, EventKind.PRODUCER_MESSAGE_RELEASED}


def test_message_events_carry_the_owner_variant(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    sent = world.send(root, kid, "hi")
    accepted = [p for p in map(events.read, world.engine.events(kid.session_id))
                if isinstance(p, events.ProducerMessageAccepted)]
    task, mail = accepted
    assert task.owner == owners.DelegationOwner() and task.agent_hop is None
    assert mail.message_id == sent.message_id
    assert mail.owner == owners.AgentOwner(root.session_id) and mail.agent_hop == 1


def _hand_written(store: Store, kind: str, data: Mapping[str, object]) -> Event:
    """An entry as an older or newer treemail could have stored it."""
    store.transact(lambda tx: tx.append("s-1", kind, data))
    with store.read() as tx:
        [event] = tx.events("s-1")
    return event


GOOD_RUN = {"run_id": "r1", "run_number": 1, "reason": "wake"}


@pytest.mark.parametrize(("kind", "data", "why"), [
    ("SessionArchived", {"archived": True}, "unknown event kind"),
    (EventKind.RUN_QUEUED, {**GOOD_RUN, "priority": 3}, "unknown field(s) ['priority']"),
    (EventKind.RUN_QUEUED, {"run_id": "r1", "run_number": 1}, "missing field 'reason'"),
    (EventKind.RUN_QUEUED, {**GOOD_RUN, "run_number": True}, "expected integer, got bool"),
    (EventKind.RUN_QUEUED, {**GOOD_RUN, "run_number": "1"}, "expected integer, got str"),
    (EventKind.PRODUCER_MESSAGE_CLAIMED, {"message_id": "m", "owner": "agent", "sender": None,
                                "run_id": "r", "request_id": "q"}, "agent mail without a sender"),
    (EventKind.PRODUCER_MESSAGE_CLAIMED, {"message_id": "m", "owner": "robot", "sender": None,
                                "run_id": "r", "request_id": "q"}, "expected one of"),
    (EventKind.TOOL_RESULTS, {"run_id": "r1", "results": [{"tool_call_id": "c"}]}, "missing field"),
    (EventKind.TOOL_RESULTS, {"run_id": "r1", "results": "c"}, "expected array"),
])
def test_an_unreadable_entry_is_an_unknown_event_not_an_error(
    store: Store, kind: str, data: Mapping[str, object], why: str
) -> None:
    event = _hand_written(store, kind, data)
    found = events.read(event)
    assert isinstance(found, UnknownEvent)
    assert (found.kind, dict(found.data)) == (kind, data)
    assert why in found.reason


def test_a_field_with_a_default_may_be_missing(store: Store) -> None:
    # An older writer that never recorded tool_calls: the default stands in.
    event = _hand_written(store, EventKind.MODEL_OUTPUT,
                          {"run_id": "r", "request_id": "q", "text": "hi"})
    assert events.read(event) == events.ModelOutput("r", "q", (), "hi", ())


def test_data_that_is_no_object_is_unknown() -> None:
    found = events.read(Event("s", 1, EventKind.RUN_STARTED, ["r", 1]))  # type: ignore[arg-type]
    assert isinstance(found, UnknownEvent) and "expected an object" in found.reason


def test_every_kind_has_one_class_and_a_closed_schema() -> None:
    assert [cls.KIND for cls in events.PAYLOADS] == list(EventKind)
    for kind, schema in events.schemas().items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["title"] == kind and schema["additionalProperties"] is False


def test_readers_show_and_skip_what_they_cannot_read(store: Store) -> None:
    from treemail.adapters.runtime.history import rebuild
    from treemail.adapters.ui.transcript import render_event

    store.transact(lambda tx: tx.append("s-1", "SessionArchived", {"archived": True}))
    store.transact(lambda tx: tx.append(
        "s-1", EventKind.MODEL_OUTPUT,
        {"run_id": "r", "request_id": "q", "text": "hi", "mood": "odd"}))
    store.transact(lambda tx: tx.append(
        "s-1", EventKind.MODEL_OUTPUT, {"run_id": "r", "request_id": "q2", "text": "kept"}))
    with store.read() as tx:
        log = list(tx.events("s-1"))
        history = rebuild(tx, "s-1")
    rows = [render_event(event, lambda sid: sid or "?") for event in log]
    assert "unreadable SessionArchived entry, skipped (unknown event kind" in rows[0]
    assert "unreadable ModelOutput entry, skipped (unknown field(s) ['mood'])" in rows[1]
    assert rows[2].endswith('model says "kept"')
    assert history == [{"role": "assistant", "content": "kept"}]


@pytest.mark.parametrize("owner", list(Owner))
@pytest.mark.parametrize("mode", ["steer", "queue"])
def test_accepted_data_is_the_payloads_encoding_key_for_key(owner: Owner, mode: str) -> None:
    """A send writes its event's data without the payload's shape: the same dict, in the same
    key order (so the same stored JSON), as the shape writes for the accepted mail."""
    sender = "0000-s" if owner in (Owner.AGENT, Owner.DELEGATION) else None
    mail = Message("m-1", "r-1", sender, owner, "hi ✓", Mode(mode), 3, 7, aged=1.5)
    expected = events.encode(events.message_payload(mail))
    written = events.accepted_data(mail)
    assert list(written.items()) == list(expected.items())
    assert all(type(value) in (str, int, type(None)) for value in written.values())
    assert EventKind.PRODUCER_MESSAGE_ACCEPTED.value == events.ACCEPTED


class _Log:
    """A WriteTxn's ``append`` alone: what a record writes, kept."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, list[tuple[str, object]]]] = []

    def append(self, session_id: str, kind: str, data: Mapping[str, object]) -> Event:
        self.entries.append((session_id, kind, list(data.items())))
        return Event(session_id, len(self.entries), kind, dict(data))


@pytest.mark.parametrize("state", list(MessageState))
@pytest.mark.parametrize("owner", list(Owner))
def test_record_message_writes_what_its_payload_encodes(state: MessageState,
                                                        owner: Owner) -> None:
    message = Message("m1", "r1", "s1", owner, "body", Mode.STEER, 1, 3, state=state,
                      run_id="run", request_id="req" if state is MessageState.CLAIMED else None,
                      reason="expired" if state is MessageState.DISCARDED else None)
    fast, general = _Log(), _Log()
    events.record_message(fast, message)  # type: ignore[arg-type]  # append is all it uses
    events.record(general, "r1", events.message_payload(message))  # type: ignore[arg-type]
    assert fast.entries == general.entries


@pytest.mark.parametrize("trigger", list(SessionTrigger))
@pytest.mark.parametrize("reason", [None, "why"])
@pytest.mark.parametrize("fault", [None, events.Fault(), events.Fault(503, "https://m", "retry")])
def test_record_run_writes_what_its_payload_encodes(
    trigger: SessionTrigger, reason: str | None, fault: events.Fault | None
) -> None:
    run = Run("run", "s1", 4)
    fast, general = _Log(), _Log()
    try:
        expected = events.run_payload(trigger, run, reason, fault)
    except ValueError as refused:
        with pytest.raises(ValueError) as caught:
            events.record_run(fast, "s1", trigger, run, reason, fault)  # type: ignore[arg-type]
        assert str(caught.value) == str(refused) and fast.entries == []
        return
    events.record_run(fast, "s1", trigger, run, reason, fault)  # type: ignore[arg-type]
    events.record(general, "s1", expected)  # type: ignore[arg-type]
    assert fast.entries == general.entries


@pytest.mark.parametrize("message_ids", [[], ["m1"], ["m1", "m2"]])
def test_record_opened_writes_what_its_payload_encodes(message_ids: list[str]) -> None:
    fast, general = _Log(), _Log()
    events.record_opened(fast, "s1", "run", "req", message_ids)  # type: ignore[arg-type]
    events.record(general, "s1",  # type: ignore[arg-type]
                  events.RequestBegun("run", "req", tuple(message_ids)))
    assert fast.entries == general.entries


@pytest.mark.parametrize("committed", [True, False])
def test_record_closed_writes_what_its_payload_encodes(committed: bool) -> None:
    closed = events.RequestCommitted if committed else events.RequestAborted
    fast, general = _Log(), _Log()
    events.record_closed(fast, "s1", committed, "run", "req")  # type: ignore[arg-type]
    events.record(general, "s1", closed("run", "req"))  # type: ignore[arg-type]
    assert fast.entries == general.entries
