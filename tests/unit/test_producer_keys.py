"""Idempotent producer sends: outside mail (user, plugin) with an idempotency key. A retry
with the same key and mail gets the first message id and writes nothing; the same key with
other mail is a typed refusal that leaves the store as it was; the key outlives a restart;
keys are scoped by session and producer kind. Plugin mail is capped at 256 KiB however it
enters, and a delegation needs a task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.engine import Engine
from treemail.core.errors import (
    InvalidRequest,
    PluginBodyTooLarge,
    ProducerKeyConflict,
    TreemailError,
)
from treemail.core.ids import CountingIds
from treemail.core.keys import Table
from treemail.core.memory_store import MemoryStore
from treemail.core.producers import PLUGIN_BODY_MAX_BYTES
from treemail.core.records import AgentSpec, Mode, Owner

SOLO = AgentSpec("solo")


def _rows(store: MemoryStore) -> dict[Table, dict[bytes, Any]]:
    return {table: store.rows(table) for table in Table}


def _refused(engine: Engine, store: MemoryStore, code: str, *args: Any, **kwargs: Any) -> None:
    """``engine.accept(*args, **kwargs)`` fails with ``code``; the store is byte for byte as
    it was."""
    before = _rows(store)
    with pytest.raises(TreemailError) as caught:
        engine.accept(*args, **kwargs)
    assert caught.value.code == code, str(caught.value)
    assert _rows(store) == before


@pytest.fixture
def setup() -> tuple[Engine, MemoryStore, str]:
    store = MemoryStore()
    engine = Engine(store, CountingIds())
    return engine, store, engine.create_root(SOLO).session_id


def test_a_keyed_retry_gets_the_first_message_id_and_writes_nothing(
    setup: tuple[Engine, MemoryStore, str],
) -> None:
    engine, store, sid = setup
    first = engine.produce(sid, "hello", Owner.USER, key="k-1")
    assert not first.replayed
    before = _rows(store)
    again = engine.produce(sid, "hello", Owner.USER, key="k-1")
    assert again.replayed and again.result.message_id == first.result.message_id
    assert again.result.recipient_state == first.result.recipient_state
    assert _rows(store) == before  # no second message, no event, no run
    assert [m.message_id for m in engine.pending(sid)] == [first.result.message_id]


def test_the_same_key_with_other_mail_is_refused_and_changes_nothing(
    setup: tuple[Engine, MemoryStore, str],
) -> None:
    engine, store, sid = setup
    message_id = engine.accept(sid, "hello", Owner.USER, key="k-1")
    code = ProducerKeyConflict.code
    _refused(engine, store, code, sid, "hello!", Owner.USER, key="k-1")
    _refused(engine, store, code, sid, "hello", Owner.USER, key="k-1", mode=Mode.STEER)
    _refused(engine, store, code, sid, "hello", Owner.USER, key="k-1", sender=sid)
    with pytest.raises(TreemailError) as caught:
        engine.accept(sid, "other", Owner.USER, key="k-1")
    assert caught.value.details["message_id"] == message_id  # names the first accept


def test_keys_are_scoped_by_session_and_producer_kind(
    setup: tuple[Engine, MemoryStore, str],
) -> None:
    engine, _, sid = setup
    other = engine.create_root(SOLO).session_id
    mine = engine.accept(sid, "hello", Owner.USER, key="k")
    theirs = engine.accept(other, "hello", Owner.USER, key="k")
    plugin = engine.accept(sid, "hello", Owner.PLUGIN, key="k")
    assert len({mine, theirs, plugin}) == 3
    # Mail without a key is never a retry: the same text twice is two messages.
    assert engine.accept(sid, "hello", Owner.USER) != engine.accept(sid, "hello", Owner.USER)


@pytest.mark.parametrize("key", ["", "\x00", "a\nb", "\ud800", "k" * 257, "é" * 129])
def test_a_key_no_store_could_hold_is_refused(
    setup: tuple[Engine, MemoryStore, str], key: str,
) -> None:
    engine, store, sid = setup
    _refused(engine, store, InvalidRequest.code, sid, "hello", Owner.USER, key=key)


def test_the_longest_key_is_taken(setup: tuple[Engine, MemoryStore, str]) -> None:
    engine, _, sid = setup
    key = "é" * 128  # 256 bytes of UTF-8
    first = engine.accept(sid, "hello", Owner.USER, key=key)
    assert engine.accept(sid, "hello", Owner.USER, key=key) == first


def test_a_keyed_accept_survives_a_restart(tmp_path: Path) -> None:
    """The key is written in the accept's own transaction: a new engine over the reopened
    store answers the retry with the first message id, and holds one message."""
    ids = CountingIds()
    store = LmdbStore.open(tmp_path / "store", sync=False)
    engine = Engine(store, ids)
    sid = engine.create_root(SOLO).session_id
    first = engine.accept(sid, "hello", Owner.PLUGIN, key="plugin-7")
    store.close()
    store = LmdbStore.open(tmp_path / "store", sync=False)
    try:
        engine = Engine(store, ids)
        engine.recover()
        assert engine.accept(sid, "hello", Owner.PLUGIN, key="plugin-7") == first
        with pytest.raises(TreemailError) as caught:
            engine.accept(sid, "bye", Owner.PLUGIN, key="plugin-7")
        assert caught.value.code == ProducerKeyConflict.code
        assert [m.message_id for m in engine.pending(sid)] == [first]
    finally:
        store.close()


def test_plugin_mail_is_capped_in_the_engine(setup: tuple[Engine, MemoryStore, str]) -> None:
    engine, store, sid = setup
    _refused(engine, store, PluginBodyTooLarge.code, sid, "x" * (PLUGIN_BODY_MAX_BYTES + 1),
             Owner.PLUGIN)
    # Counted in UTF-8 bytes, not characters.
    _refused(engine, store, PluginBodyTooLarge.code, sid, "é" * (PLUGIN_BODY_MAX_BYTES // 2 + 1),
             Owner.PLUGIN)
    assert engine.accept(sid, "x" * PLUGIN_BODY_MAX_BYTES, Owner.PLUGIN)
    assert engine.accept(sid, "x" * (PLUGIN_BODY_MAX_BYTES + 1), Owner.USER)  # plugins only


@pytest.mark.parametrize("task", ["", " ", "\n\t", "\u3000"])
def test_a_delegation_without_a_task_is_refused(
    setup: tuple[Engine, MemoryStore, str], task: str,
) -> None:
    engine, store, sid = setup
    before = _rows(store)
    with pytest.raises(TreemailError) as caught:
        engine.delegate(sid, SOLO, task)
    assert caught.value.code == InvalidRequest.code
    assert "task" in caught.value.message
    assert _rows(store) == before
