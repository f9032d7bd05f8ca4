"""The sample world every store's contract runs on, and the hooks a backend fills in.

The ids, the realistic records, the ``populate`` and ``mutate_everything`` worlds and the
``snapshot`` that compares two stores are public, so a backend's own tests can reuse them;
``StoreHarness`` holds the three hooks a backend implements and the fixtures built on them,
shared by ``StoreContract`` and ``TransactionContract``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from treemail.core import keys
from treemail.core.ids import CountingIds
from treemail.core.keys import CounterName
from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.core.permissions import Rules
from treemail.core.records import (
    AgentSpec,
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
from treemail.core.store import ReadTxn, Store, WriteTxn

__all__ = [
    "CHILD",
    "COUNTERS",
    "GHOST",
    "HANDLES",
    "KEYS",
    "MESSAGE_IDS",
    "NEWCOMER",
    "OTHER_ROOT",
    "PRODUCER_KEY",
    "REPLAY_KEYS",
    "ROOT",
    "ROOTS",
    "RUN_IDS",
    "SESSION_IDS",
    "Boom",
    "StoreHarness",
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


# -- the hooks ------------------------------------------------------------------------------


class StoreHarness:
    """A backend's hooks (``make_store``, ``reopen``, ``counter_names``), and the fixtures and
    reads the contract's tests share."""

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
