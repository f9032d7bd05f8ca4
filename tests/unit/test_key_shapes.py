"""The keys a send builds by a shorter way equal the general functions' keys: the replay key
of a call id ``storable`` passed, and a numbered row's stored key built from its tag."""

from __future__ import annotations

import pytest

from treemail.core import ids, keys
from treemail.core.ids import MAX_REFERENCE, canonical_uuid, storable
from treemail.core.keys import NUMBERED, Table
from treemail.core.records import IdempotencyKey

SESSION = "00000001-0000-4000-8000-000000000000"
RUN = "00000002-0000-4000-8000-000000000000"


@pytest.mark.parametrize("call_id", [
    "c1", "call_ü€😀", "x" * MAX_REFERENCE, "😀" * (MAX_REFERENCE // 4), "a/b c",
])
def test_a_storable_call_id_keys_its_replay_row_as_identity_does(call_id: str) -> None:
    assert storable(call_id)
    key = IdempotencyKey(SESSION, RUN, call_id)
    assert keys.storable_call_replay(key) == keys.call_replay(key) == keys.replay(key)


@pytest.mark.parametrize("table", sorted(NUMBERED))
@pytest.mark.parametrize("number", [0, 1, 10, 255, 2**64 - 1])
def test_a_numbered_rows_stored_key_is_its_tag_before_its_number(
        table: Table, number: int) -> None:
    key = keys.pending(SESSION, number)  # the owner, SEP and 8 bytes, as events and trees
    assert key[:-8] + NUMBERED[table] + key[-8:] == keys.stored_key(table, key)
    assert keys.logical_key(keys.stored_key(table, key)) == (table, key)


def test_a_uuid_spelling_is_remembered_as_it_was_answered() -> None:
    upper = SESSION.upper()
    for _ in range(2):  # the second answer comes from what the first kept
        assert canonical_uuid(upper) == SESSION
        assert canonical_uuid(SESSION) == SESSION
        assert canonical_uuid(SESSION + "\n") is None
        assert canonical_uuid("worker_00000001") is None


def test_a_full_memory_of_uuid_spellings_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_CANONICAL_LIMIT", 2)
    monkeypatch.setattr(ids, "_CANONICAL", {})
    spellings = [f"0000000{n}-0000-4000-8000-00000000000A" for n in range(5)]
    for _ in range(2):
        assert [canonical_uuid(s) for s in spellings] == [s.lower() for s in spellings]
    assert 0 < len(ids._CANONICAL) <= 2
