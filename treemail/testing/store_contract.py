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
The records, ids and the ``populate`` / ``mutate_everything`` worlds are public (in
``store_sample``, re-exported here), so a backend's own tests can reuse them.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from treemail.core import keys
from treemail.core.errors import StorageError, StoreClosed
from treemail.core.keys import MAX_KEY, CounterName
from treemail.core.lifecycle import MessageState, RunState
from treemail.core.memory_store import MemoryStore
from treemail.core.permissions import Action
from treemail.core.records import (
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
)
from treemail.core.results import CallOutcome
from treemail.core.store import Store, WriteTxn
from treemail.testing.store_sample import (
    CHILD,
    COUNTERS,
    GHOST,
    HANDLES,
    KEYS,
    MESSAGE_IDS,
    NEWCOMER,
    OTHER_ROOT,
    PRODUCER_KEY,
    ROOT,
    ROOTS,
    RUN_IDS,
    SESSION_IDS,
    Boom,
    StoreHarness,
    failing,
    message,
    mutate_everything,
    populate,
    session,
    snapshot,
)
from treemail.testing.store_sends import SendContract
from treemail.testing.store_transactions import TransactionContract

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
    "StoreHarness",
    "TransactionContract",
    "failing",
    "message",
    "mutate_everything",
    "populate",
    "session",
    "snapshot",
]


class StoreContract(TransactionContract, SendContract):
    """The whole contract: records, indexes and misuse here, transactions and savepoints in
    ``TransactionContract``, a send's own operations in ``SendContract``, the hooks in
    ``StoreHarness``."""

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
