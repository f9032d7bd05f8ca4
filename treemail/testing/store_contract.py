"""``StoreContract``: the one suite every Store backend passes, shipped in the package.

A backend of treemail's own or of anyone's is tested by subclassing it (with pytest)::

    from treemail.testing import StoreContract

    class TestMyStore(StoreContract):
        def make_store(self, directory): ...      # a fresh, empty store
        def reopen(self, store, directory): ...   # the same data, as a restarted process finds it
        def counter_names(self, store): ...       # the counters physically kept

Every ``test_*`` method then runs against the backend: records round-trip exactly, the
indexes (pending, tree, handles, feed) follow every write, counters vanish at 0, a failed
transaction or savepoint leaves the store exactly as before, and misuse is refused alike.
``MemoryStore`` is the reference: where a test needs the expected state, it asks a fresh one.
The records, ids and the ``populate`` / ``mutate_everything`` worlds are public, so a
backend's own tests can reuse them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from treemail.core import keys
from treemail.core.errors import StorageError, StoreClosed
from treemail.core.ids import CountingIds
from treemail.core.keys import MAX_KEY, CounterName
from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.core.permissions import Action, Rules
from treemail.core.records import (
    AgentSpec,
    Approval,
    ApprovalState,
    Event,
    IdempotencyKey,
    Message,
    Mode,
    Owner,
    ProducerKey,
    RecipientState,
    Run,
    SendResult,
    Session,
)
from treemail.core.results import CallOutcome
from treemail.core.store import MemoryStore, ReadTxn, Store, WriteTxn

__all__ = [
    "CHILD",
    "COUNTERS",
    "GHOST",
    "HANDLES",
    "KEYS",
    "MESSAGE_IDS",
    "NEWCOMER",
    "OTHER_ROOT",
    "ROOT",
    "ROOTS",
    "RUN_IDS",
    "SESSION_IDS",
    "Boom",
    "StoreContract",
    "failing",
    "message",
    "mutate_everything",
    "populate",
    "session",
    "snapshot",
]

_ids = CountingIds()
ROOT, OTHER_ROOT, CHILD, GHOST, NEWCOMER = (_ids.new_id() for _ in range(5))
SESSION_IDS = (ROOT, OTHER_ROOT, CHILD, GHOST, NEWCOMER)
ROOTS = (ROOT, OTHER_ROOT)
RUN_IDS = tuple(_ids.new_id() for _ in range(3))
MESSAGE_IDS = tuple(_ids.new_id() for _ in range(6))
HANDLES = ("main", "worker_1", "worker_2", "scout_1", "scout_2")
COUNTERS = (keys.SESSIONS_COUNTER, keys.inbox_counter(CHILD), keys.pair_counter(ROOT, CHILD),
            "fresh")
KEYS = tuple(IdempotencyKey(ROOT, RUN_IDS[0], f"call-{n}") for n in range(3))
# A producer's key with a tool call's id for its text: the two layouts share the replay table
# and must never meet.
PRODUCER_KEY = ProducerKey(ROOT, Owner.USER, "call-0")
REPLAY_KEYS: tuple[IdempotencyKey | ProducerKey, ...] = (*KEYS, PRODUCER_KEY)


# -- realistic records ---------------------------------------------------------------------


def session(sid: str, root: str, handle: str | None, ordinal: int, *, live: bool = True) -> Session:
    parent = None if sid == root else root
    agent = AgentSpec("worker", "does the work", Rules.of({"child": "allow", "*": "deny"}))
    return Session(sid, root, parent, agent, handle, ordinal, state=SessionState.IDLE, live=live)


def message(
    mid: str, recipient: str, seq: int, *, state: str = MessageState.ACCEPTED, body: str = "hello"
) -> Message:
    return Message(
        message_id=mid,
        recipient=recipient,
        sender=ROOT,
        owner=Owner.AGENT,
        body=body,
        mode=Mode.QUEUE,
        hop=1,
        seq=seq,
        state=state,
    )


def populate(tx: WriteTxn) -> None:
    """A small world touching every table."""
    tx.put_session(session(ROOT, ROOT, "main", 1))
    tx.put_session(session(CHILD, ROOT, "worker_1", 2))
    tx.put_session(session(GHOST, ROOT, "scout_1", 3))
    tx.put_session(session(OTHER_ROOT, OTHER_ROOT, "main", 4))
    tx.put_run(Run(RUN_IDS[0], ROOT, 1, RunState.RUNNING, base_hop=2))
    tx.put_message(message(MESSAGE_IDS[0], CHILD, 1))
    tx.put_message(message(MESSAGE_IDS[1], CHILD, 2, state=MessageState.ADMITTED))
    tx.put_message(message(MESSAGE_IDS[2], ROOT, 3, state=MessageState.CONSUMED))
    tx.add(keys.SESSIONS_COUNTER, 4)
    tx.add(keys.inbox_counter(CHILD), 2)
    tx.add(keys.pair_counter(ROOT, CHILD), 1)
    tx.remember(KEYS[0], SendResult(MESSAGE_IDS[0], Mode.QUEUE, RecipientState.QUEUED))
    tx.remember(PRODUCER_KEY, SendResult(MESSAGE_IDS[2], Mode.STEER, RecipientState.RUNNING))
    tx.append(ROOT, "created", {"handle": "main"})
    tx.append(CHILD, "created", {"handle": "worker_1"})


def mutate_everything(tx: WriteTxn) -> None:
    """A change to every table and index that ``populate`` filled."""
    tx.put_session(session(CHILD, ROOT, "worker_2", 2))
    tx.put_session(session(GHOST, ROOT, "scout_1", 3, live=False))
    tx.put_session(session(NEWCOMER, OTHER_ROOT, "scout_2", 5))
    tx.put_run(Run(RUN_IDS[0], ROOT, 1, RunState.FINISHED, base_hop=2))
    tx.put_run(Run(RUN_IDS[1], CHILD, 1))
    tx.put_message(message(MESSAGE_IDS[0], CHILD, 1, state=MessageState.DISCARDED))
    tx.put_message(message(MESSAGE_IDS[3], CHILD, 4))
    tx.add(keys.inbox_counter(CHILD), -2)
    tx.add(CounterName("fresh"), 7)
    tx.remember(KEYS[0], SendResult(MESSAGE_IDS[3], Mode.STEER, RecipientState.RUNNING))
    tx.remember(KEYS[1], SendResult(MESSAGE_IDS[3], Mode.QUEUE, RecipientState.QUEUED))
    tx.append(ROOT, "ended", {"run_id": RUN_IDS[0]})
    tx.append(NEWCOMER, "created", {"handle": "scout_2"})


def snapshot(tx: ReadTxn) -> dict[str, Any]:
    """Everything the port can show about the ids above."""
    return {
        "sessions": list(tx.sessions()),
        "trees": {r: list(tx.tree(r)) for r in ROOTS},
        "handles": {(r, h): tx.handle_owner(r, h) for r in ROOTS for h in HANDLES},
        "runs": {rid: tx.run(rid) for rid in RUN_IDS},
        "messages": {mid: tx.message(mid) for mid in MESSAGE_IDS},
        "pending": {sid: list(tx.pending(sid)) for sid in SESSION_IDS},
        "counts": {name: tx.count(CounterName(name)) for name in COUNTERS},
        "replay": {key: tx.recall(key) for key in REPLAY_KEYS},
        "events": {sid: list(tx.events(sid)) for sid in SESSION_IDS},
    }


class Boom(Exception):
    pass


def failing(work: Any) -> Any:
    def run(tx: WriteTxn) -> None:
        work(tx)
        raise Boom

    return run


# -- the contract --------------------------------------------------------------------------


class StoreContract:
    def make_store(self, directory: Path) -> Store:
        raise NotImplementedError

    def reopen(self, store: Store, directory: Path) -> Store:
        """The store as a restarted process would find it."""
        raise NotImplementedError

    def counter_names(self, store: Store) -> set[str]:
        """The names of the counters physically kept."""
        raise NotImplementedError

    @pytest.fixture
    def directory(self, tmp_path: Path) -> Path:
        return tmp_path / "store"

    @pytest.fixture
    def store(self, directory: Path) -> Iterator[Store]:
        opened = self.make_store(directory)
        yield opened
        opened.close()

    def read(self, store: Store) -> dict[str, Any]:
        with store.read() as tx:
            return snapshot(tx)

    # -- records round-trip exactly --------------------------------------------------------

    def test_a_producer_key_and_a_tool_call_key_never_meet(self, store: Store) -> None:
        store.transact(populate)
        with store.read() as tx:
            tool_call, producer = tx.recall(KEYS[0]), tx.recall(PRODUCER_KEY)
            plugin = tx.recall(ProducerKey(ROOT, Owner.PLUGIN, "call-0"))
        assert tool_call is not None and tool_call.message_id == MESSAGE_IDS[0]
        assert producer is not None and producer.message_id == MESSAGE_IDS[2]
        assert plugin is None  # another producer kind: another key

    def test_records_round_trip_exactly(self, store: Store, directory: Path) -> None:
        root = session(ROOT, ROOT, "main", 1)
        run = Run(RUN_IDS[0], ROOT, 3, RunState.INTERRUPTED, base_hop=4, open_request="req")
        mail = Message(
            MESSAGE_IDS[0], ROOT, CHILD, Owner.PLUGIN, "body ✓\nline", Mode.STEER, 5, 9,
            state=MessageState.CLAIMED, run_id=RUN_IDS[0], request_id="req", reason=None,
        )  # fmt: skip
        result = SendResult(MESSAGE_IDS[0], Mode.STEER, RecipientState.WAKING_FINISHED)

        def work(tx: WriteTxn) -> None:
            tx.put_session(root)
            tx.put_run(run)
            tx.put_message(mail)
            tx.remember(KEYS[0], result)
            tx.append(ROOT, "Accepted", {"ids": ["a", "b"], "hop": 2, "nested": {"x": None}})

        store.transact(work)
        store = self.reopen(store, directory)
        with store.read() as tx:
            assert tx.session(ROOT) == root
            assert tx.run(RUN_IDS[0]) == run
            assert tx.message(MESSAGE_IDS[0]) == mail
            assert tx.recall(KEYS[0]) == result
            events = list(tx.events(ROOT))
            got_session, got_run = tx.session(ROOT), tx.run(RUN_IDS[0])
            got_mail, got_result = tx.message(MESSAGE_IDS[0]), tx.recall(KEYS[0])
        assert events == [
            Event(ROOT, 1, "Accepted", {"ids": ["a", "b"], "hop": 2, "nested": {"x": None}})
        ]
        # Equal is not enough for StrEnums ("steer" == Mode.STEER): the types must come back.
        assert got_session is not None and got_run is not None
        assert got_mail is not None and got_result is not None
        assert got_session.agent.rules.decide("child") is Action.ALLOW
        assert got_session.agent.rules.decide("sibling") is Action.DENY
        assert got_run.status is RunState.INTERRUPTED
        assert got_mail.owner is Owner.PLUGIN and got_mail.mode is Mode.STEER
        assert got_result.recipient_state is RecipientState.WAKING_FINISHED

    def test_absent_records_are_none(self, store: Store) -> None:
        store.transact(populate)
        with store.read() as tx:
            assert tx.session(NEWCOMER) is None
            assert tx.run(RUN_IDS[2]) is None
            assert tx.message(MESSAGE_IDS[5]) is None
            assert tx.recall(KEYS[2]) is None
            assert tx.handle_owner(ROOT, "nobody") is None
            assert tx.count(CounterName("never")) == 0
            assert list(tx.pending(NEWCOMER)) == []
            assert list(tx.events(NEWCOMER)) == []
            assert list(tx.tree(NEWCOMER)) == []
        with MemoryStore().read() as empty:
            assert empty.feed_end() == 0

    @pytest.mark.parametrize("record_id", ["", "x" * (MAX_KEY + 1), "é" * 300, "a\x00b",
                                           "\ud800"])
    def test_an_id_no_store_could_key_names_nothing(self, store: Store, record_id: str) -> None:
        # A lookup by such an id (a daemon's message.get, approval.answer) failed with a
        # storage error on LMDB (and for "" only there), instead of finding nothing.
        store.transact(populate)
        with store.read() as tx:
            assert tx.session(record_id) is None
            assert tx.run(record_id) is None
            assert tx.message(record_id) is None
            assert tx.approval(record_id) is None
            # Nor is a counter or a replay entry kept under it (World.snapshot reads both).
            assert tx.count(keys.inbox_counter(record_id)) == 0
            assert tx.recall(IdempotencyKey(ROOT, RUN_IDS[0], record_id)) is None
            assert list(tx.events(record_id)) == []  # a daemon's run.list, events.read
            assert list(tx.pending(record_id)) == []
            assert list(tx.tree(record_id)) == []

    # -- pending -----------------------------------------------------------------------------

    def test_pending_is_in_seq_order_and_per_recipient(self, store: Store) -> None:
        def work(tx: WriteTxn) -> None:
            # 256 and 513 sort before 1 and 2 if the seq bytes were little-endian.
            for mid, seq in zip(MESSAGE_IDS[:4], (256, 2, 513, 1), strict=True):
                tx.put_message(message(mid, CHILD, seq))
            tx.put_message(message(MESSAGE_IDS[4], ROOT, 1))

        store.transact(work)
        with store.read() as tx:
            assert [m.seq for m in tx.pending(CHILD)] == [1, 2, 256, 513]
            assert [m.message_id for m in tx.pending(ROOT)] == [MESSAGE_IDS[4]]

    def test_pending_does_not_leak_between_prefix_ids(self, store: Store) -> None:
        def work(tx: WriteTxn) -> None:
            tx.put_message(message(MESSAGE_IDS[0], "worker", 1))
            tx.put_message(message(MESSAGE_IDS[1], "worker_2", 1))

        store.transact(work)
        with store.read() as tx:
            assert [m.message_id for m in tx.pending("worker")] == [MESSAGE_IDS[0]]
            assert [m.message_id for m in tx.pending("worker_2")] == [MESSAGE_IDS[1]]

    @pytest.mark.parametrize("final", [MessageState.CONSUMED, MessageState.DISCARDED])
    def test_final_message_leaves_pending_but_stays_stored(self, store: Store, final: str) -> None:
        store.transact(populate)
        gone = message(MESSAGE_IDS[1], CHILD, 2, state=final)
        store.transact(lambda tx: tx.put_message(gone))
        with store.read() as tx:
            assert [m.message_id for m in tx.pending(CHILD)] == [MESSAGE_IDS[0]]
            assert tx.message(MESSAGE_IDS[1]) == gone

    def test_pending_shows_the_latest_version_of_a_message(self, store: Store) -> None:
        store.transact(populate)
        claimed = message(MESSAGE_IDS[0], CHILD, 1, state=MessageState.CLAIMED)
        store.transact(lambda tx: tx.put_message(claimed))
        with store.read() as tx:
            assert [m.state for m in tx.pending(CHILD)] == [MessageState.CLAIMED,
                                                            MessageState.ADMITTED]

    def test_messages_can_be_rewritten_while_iterating_pending(self, store: Store) -> None:
        store.transact(populate)

        def consume_all(tx: WriteTxn) -> int:
            seen = 0
            for m in tx.pending(CHILD):
                tx.put_message(attrs.evolve(m, state=MessageState.CONSUMED))
                seen += 1
            return seen

        assert store.transact(consume_all) == 2
        with store.read() as tx:
            assert list(tx.pending(CHILD)) == []

    # -- handles and trees -------------------------------------------------------------------

    def test_handle_index_follows_handle_changes_and_ghosts(self, store: Store) -> None:
        store.transact(populate)
        with store.read() as tx:
            assert tx.handle_owner(ROOT, "worker_1") == CHILD
            assert tx.handle_owner(ROOT, "main") == ROOT
            assert tx.handle_owner(OTHER_ROOT, "main") == OTHER_ROOT
            assert tx.handle_owner(OTHER_ROOT, "worker_1") is None
        store.transact(lambda tx: tx.put_session(session(CHILD, ROOT, "worker_2", 2)))
        with store.read() as tx:
            assert tx.handle_owner(ROOT, "worker_1") is None
            assert tx.handle_owner(ROOT, "worker_2") == CHILD
        store.transact(lambda tx: tx.put_session(session(CHILD, ROOT, "worker_2", 2, live=False)))
        with store.read() as tx:
            assert tx.handle_owner(ROOT, "worker_2") is None
            # A ghost is still reachable by id and still part of its tree.
            assert tx.session(CHILD) == session(CHILD, ROOT, "worker_2", 2, live=False)
            assert CHILD in [s.session_id for s in tx.tree(ROOT)]

    def test_session_without_handle_has_no_handle_entry(self, store: Store) -> None:
        store.transact(populate)
        store.transact(lambda tx: tx.put_session(session(CHILD, ROOT, None, 2)))
        with store.read() as tx:
            assert tx.handle_owner(ROOT, "worker_1") is None
            assert tx.session(CHILD) == session(CHILD, ROOT, None, 2)

    def test_tree_and_sessions_are_in_ordinal_order(self, store: Store) -> None:
        def work(tx: WriteTxn) -> None:
            tx.put_session(session(GHOST, ROOT, "scout_1", 257, live=False))
            tx.put_session(session(OTHER_ROOT, OTHER_ROOT, "main", 5))
            tx.put_session(session(ROOT, ROOT, "main", 1))
            tx.put_session(session(CHILD, ROOT, "worker_1", 40))

        store.transact(work)
        with store.read() as tx:
            assert [s.session_id for s in tx.tree(ROOT)] == [ROOT, CHILD, GHOST]
            assert [s.session_id for s in tx.tree(OTHER_ROOT)] == [OTHER_ROOT]
            assert [s.ordinal for s in tx.sessions()] == [1, 5, 40, 257]

    # -- counters, replay, events --------------------------------------------------------

    def test_counters_add_go_negative_and_vanish_at_zero(self, store: Store) -> None:
        assert store.transact(lambda tx: tx.add(CounterName("inbox"), 3)) == 3
        assert store.transact(lambda tx: tx.add(CounterName("inbox"), -1)) == 2
        assert store.transact(lambda tx: tx.add(CounterName("debt"), -5)) == -5
        with store.read() as tx:
            assert (tx.count(CounterName("inbox")), tx.count(CounterName("debt"))) == (2, -5)
        assert self.counter_names(store) == {"inbox", "debt"}
        assert store.transact(lambda tx: tx.add(CounterName("inbox"), -2)) == 0
        assert store.transact(lambda tx: tx.add(CounterName("debt"), 5)) == 0
        with store.read() as tx:
            assert (tx.count(CounterName("inbox")), tx.count(CounterName("debt"))) == (0, 0)
        assert self.counter_names(store) == set()

    def test_remember_and_recall_by_full_key(self, store: Store) -> None:
        first = SendResult(MESSAGE_IDS[0], Mode.QUEUE, RecipientState.QUEUED)
        second = SendResult(MESSAGE_IDS[1], Mode.STEER, RecipientState.RUNNING)
        # Keys whose parts differ only in where one part ends and the next begins.
        split_a = IdempotencyKey("ab", "c", "d")
        split_b = IdempotencyKey("a", "bc", "d")

        def work(tx: WriteTxn) -> None:
            tx.remember(KEYS[0], first)
            tx.remember(split_a, first)
            tx.remember(split_b, second)

        store.transact(work)
        with store.read() as tx:
            assert tx.recall(KEYS[0]) == first
            assert tx.recall(KEYS[1]) is None
            assert tx.recall(split_a) == first
            assert tx.recall(split_b) == second
        store.transact(lambda tx: tx.remember(KEYS[0], second))
        with store.read() as tx:
            assert tx.recall(KEYS[0]) == second

    def test_events_are_numbered_per_session_and_read_after_a_seq(self, store: Store) -> None:
        def work(tx: WriteTxn) -> list[Event]:
            return [tx.append(sid, f"e{n}", {"n": n}) for n, sid in
                    enumerate((ROOT, CHILD, ROOT, ROOT, CHILD))]  # fmt: skip

        appended = store.transact(work)
        assert [(e.session_id, e.seq) for e in appended] == [
            (ROOT, 1), (CHILD, 1), (ROOT, 2), (ROOT, 3), (CHILD, 2)
        ]  # fmt: skip
        with store.read() as tx:
            assert list(tx.events(ROOT)) == [appended[0], appended[2], appended[3]]
            assert list(tx.events(ROOT, after=2)) == [appended[3]]
            assert list(tx.events(ROOT, after=3)) == []
            assert list(tx.events(ROOT, after=-1)) == [appended[0], appended[2], appended[3]]
            assert [e.kind for e in tx.events(CHILD, after=1)] == ["e4"]
        # Numbering continues across transactions.
        assert store.transact(lambda tx: tx.append(ROOT, "later", {})).seq == 4

    def test_event_data_is_copied_at_append(self, store: Store) -> None:
        data: dict[str, object] = {"ids": ["a"]}
        store.transact(lambda tx: tx.append(ROOT, "k", data))
        data["late"] = True
        with store.read() as tx:
            assert [e.data for e in tx.events(ROOT)] == [{"ids": ["a"]}]

    def test_feed_orders_every_session_globally_and_reads_after_a_number(
        self, store: Store, directory: Path
    ) -> None:
        first = store.transact(lambda tx: [tx.append(ROOT, "a", {}), tx.append(CHILD, "b", {})])
        with pytest.raises(Boom):  # an aborted append takes no number in the feed
            store.transact(failing(lambda tx: tx.append(ROOT, "lost", {})))
        later = store.transact(lambda tx: tx.append(ROOT, "c", {}))
        store = self.reopen(store, directory)
        with store.read() as tx:
            assert list(tx.feed()) == [(1, first[0]), (2, first[1]), (3, later)]
            assert list(tx.feed(after=2)) == [(3, later)]
            assert list(tx.feed(after=3)) == []
            assert tx.feed_end() == 3

    def test_feed_savepoint_failure_gives_its_numbers_back(self, store: Store) -> None:
        def work(tx: WriteTxn) -> Event:
            with pytest.raises(Boom), tx.savepoint() as sp:
                sp.append(CHILD, "undone", {})
                raise Boom
            return tx.append(ROOT, "kept", {})

        kept = store.transact(work)
        with store.read() as tx:
            assert list(tx.feed()) == [(1, kept)]
            assert tx.feed_end() == 1

    def test_approvals_round_trip_and_list_in_id_order(
        self, store: Store, directory: Path
    ) -> None:
        waiting = Approval("b/run/call", ROOT, RUN_IDS[0], "call", "send_message",
                           {"to": "x", "body": "hi", "nested": [1, {"k": None}]}, "sibling")
        answered = attrs.evolve(waiting, approval_id="a/run/call", state=ApprovalState.APPROVED,
                                scope="tree", outcome=CallOutcome.ok({"message_id": "m"}))
        def work(tx: WriteTxn) -> None:
            tx.put_approval(waiting)
            tx.put_approval(answered)

        store.transact(work)
        store = self.reopen(store, directory)
        with store.read() as tx:
            assert tx.approval("b/run/call") == waiting
            assert tx.approval("missing") is None
            assert list(tx.approvals()) == [answered, waiting]
            assert type(next(tx.approvals()).state) is ApprovalState

    # -- transactions ----------------------------------------------------------------------

    def test_transact_returns_the_work_result(self, store: Store) -> None:
        def work(tx: WriteTxn) -> tuple[int, Event]:
            return tx.add(CounterName("n"), 2), tx.append(ROOT, "k", {})

        assert store.transact(work) == (2, Event(ROOT, 1, "k", {}))

    def test_raising_work_leaves_the_store_exactly_as_before(self, store: Store) -> None:
        store.transact(populate)
        before = self.read(store)
        seen_inside: list[dict[str, Any]] = []

        def work(tx: WriteTxn) -> None:
            mutate_everything(tx)
            seen_inside.append(snapshot(tx))

        with pytest.raises(Boom):
            store.transact(failing(work))
        # The work really changed every part of the snapshot before it raised...
        assert all(seen_inside[0][part] != before[part] for part in before)
        # ...and none of it was kept.
        assert self.read(store) == before

    def test_committed_work_is_all_kept(self, store: Store, directory: Path) -> None:
        store.transact(populate)
        expected: list[dict[str, Any]] = []
        def work(tx: WriteTxn) -> None:
            mutate_everything(tx)
            expected.append(snapshot(tx))

        store.transact(work)
        store = self.reopen(store, directory)
        assert self.read(store) == expected[0]

    def test_failed_savepoint_undoes_only_its_own_writes(self, store: Store) -> None:
        store.transact(populate)

        def work(tx: WriteTxn) -> Event:
            tx.add(CounterName("kept"), 1)
            with pytest.raises(Boom), tx.savepoint() as sp:
                mutate_everything(sp)
                sp.append(CHILD, "undone", {})
                raise Boom
            with tx.savepoint() as sp:
                sp.put_message(message(MESSAGE_IDS[4], CHILD, 9))
            return tx.append(CHILD, "after", {})

        after = store.transact(work)
        expected = self.read_after(store, populate)
        expected["pending"][CHILD].append(message(MESSAGE_IDS[4], CHILD, 9))
        expected["messages"][MESSAGE_IDS[4]] = message(MESSAGE_IDS[4], CHILD, 9)
        expected["events"][CHILD].append(after)
        assert after.seq == 2  # the undone append gave its number back
        with store.read() as tx:
            assert tx.count(CounterName("kept")) == 1
        assert self.read(store) == expected

    def read_after(self, store: Store, work: Any) -> dict[str, Any]:
        """The snapshot a fresh store would show after ``work``."""
        fresh = MemoryStore()
        fresh.transact(work)
        return self.read(fresh)

    def test_nested_savepoint_failure_keeps_the_enclosing_savepoint(self, store: Store) -> None:
        def work(tx: WriteTxn) -> None:
            with tx.savepoint() as outer:
                outer.add(CounterName("outer"), 1)
                with pytest.raises(Boom), outer.savepoint() as inner:
                    inner.add(CounterName("inner"), 1)
                    inner.add(CounterName("outer"), 10)
                    raise Boom
                outer.add(CounterName("outer"), 1)

        store.transact(work)
        with store.read() as tx:
            assert (tx.count(CounterName("outer")), tx.count(CounterName("inner"))) == (2, 0)

    def test_a_savepoint_reads_its_own_writes_in_ranges_and_undoes_them(
            self, store: Store) -> None:
        # Ranges and counts see a savepoint's unfinished writes; undoing it (at any depth)
        # undoes exactly them, whether or not they were already written out for the range.
        store.transact(populate)
        with store.read() as tx:
            log, feed = [e.kind for e in tx.events(CHILD)], tx.feed_end()

        def work(tx: WriteTxn) -> list[int]:
            with pytest.raises(Boom), tx.savepoint() as sp:
                sp.put_message(message(MESSAGE_IDS[4], CHILD, 9))
                assert [m.seq for m in sp.pending(CHILD)] == [1, 2, 9]
                sp.append(CHILD, "undone", {})
                assert [e.kind for e in sp.events(CHILD)] == [*log, "undone"]
                assert sp.feed_end() == feed + 1
                raise Boom
            with tx.savepoint() as outer:
                outer.put_message(message(MESSAGE_IDS[4], CHILD, 9))
                with pytest.raises(Boom), outer.savepoint() as inner:
                    inner.put_message(message(MESSAGE_IDS[3], CHILD, 8))
                    assert [m.seq for m in inner.pending(CHILD)] == [1, 2, 8, 9]
                    raise Boom
                assert [m.seq for m in outer.pending(CHILD)] == [1, 2, 9]
                with outer.savepoint() as kept:
                    kept.append(CHILD, "kept", {})
            return [m.seq for m in tx.pending(CHILD)]

        assert store.transact(work) == [1, 2, 9]
        with store.read() as tx:
            assert [m.seq for m in tx.pending(CHILD)] == [1, 2, 9]
            assert tx.message(MESSAGE_IDS[3]) is None
            assert [e.kind for e in tx.events(CHILD)] == [*log, "kept"]
            assert tx.feed_end() == feed + 1

    def test_a_row_changed_at_every_depth_is_undone_to_each_depth(self, store: Store) -> None:
        # A counter changed by the transaction, a savepoint and one inside it, with range
        # reads forcing writes out mid-savepoint: each undo goes back exactly one level.
        def work(tx: WriteTxn) -> tuple[int, int, int]:
            tx.add(CounterName("n"), 1)
            with tx.savepoint() as outer:
                outer.add(CounterName("n"), 10)
                with pytest.raises(Boom), outer.savepoint() as inner:
                    inner.add(CounterName("n"), 100)
                    inner.put_message(message(MESSAGE_IDS[4], CHILD, 9))
                    assert [m.seq for m in inner.pending(CHILD)] == [9]
                    assert inner.count(CounterName("n")) == 111
                    raise Boom
                after_inner = outer.count(CounterName("n"))
                outer.add(CounterName("n"), 1000)
            after_outer = tx.count(CounterName("n"))
            tx.add(CounterName("m"), 7)  # before the last savepoint, untouched by it
            with pytest.raises(Boom), tx.savepoint() as last:
                last.add(CounterName("n"), 5)
                assert list(last.pending(CHILD)) == []
                raise Boom
            return after_inner, after_outer, tx.count(CounterName("n")) + tx.count(CounterName("m"))

        assert store.transact(work) == (11, 1011, 1018)
        with store.read() as tx:
            assert (tx.count(CounterName("n")), tx.count(CounterName("m"))) == (1011, 7)
            assert tx.message(MESSAGE_IDS[4]) is None and list(tx.pending(CHILD)) == []

    def test_outer_txn_stays_usable_inside_a_savepoint(self, store: Store) -> None:
        # MemoryStore's savepoint yields the transaction itself; code written against it may
        # keep using the outer name, so every store must accept that.
        def work(tx: WriteTxn) -> None:
            tx.add(CounterName("n"), 1)
            with tx.savepoint() as sp:
                tx.add(CounterName("n"), 1)
                assert sp.count(CounterName("n")) == 2
            with pytest.raises(Boom), tx.savepoint():
                tx.add(CounterName("n"), 100)
                raise Boom

        store.transact(work)
        with store.read() as tx:
            assert tx.count(CounterName("n")) == 2

    def test_savepoint_failure_rolls_back_then_transact_failure_rolls_back_all(
        self, store: Store
    ) -> None:
        def work(tx: WriteTxn) -> None:
            with tx.savepoint() as sp:
                populate(sp)
            raise Boom

        with pytest.raises(Boom):
            store.transact(work)
        assert self.read(store) == self.read(MemoryStore())

    # -- misuse ----------------------------------------------------------------------------

    def test_closed_store_raises(self, store: Store) -> None:
        store.close()
        store.close()  # closing twice is harmless
        with pytest.raises(StoreClosed, match="is closed"), store.read():
            pass
        with pytest.raises(StoreClosed, match="is closed"):
            store.transact(lambda tx: tx.add(CounterName("n"), 1))

    @pytest.mark.parametrize("name", ["a\x00b", "x" * (MAX_KEY + 1), "\U0001f600" * 130])
    def test_unstorable_key_is_refused_alike_and_changes_nothing(
        self, store: Store, name: str
    ) -> None:
        store.transact(populate)
        before = self.read(store)
        with pytest.raises(StorageError, match=r"NUL|at most"):
            store.transact(lambda tx: tx.add(CounterName(name), 1))
        with pytest.raises(StorageError, match=r"NUL|at most"):
            store.transact(lambda tx: tx.remember(IdempotencyKey(ROOT, RUN_IDS[0], name),
                                                  SendResult("m", Mode.QUEUE,
                                                             RecipientState.QUEUED)))
        assert self.read(store) == before
