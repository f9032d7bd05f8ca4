"""Whole model replies through the real actor, on both stores: every tool call ends in a
typed tool result, no actor crashes or logs an incident, nothing hangs, an all-refused reply
changes nothing, and the session stays deliverable (tests/fuzz/replies.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import budget
from tests.fuzz.replies import REPLIES, assert_sound, run_reply
from tests.unit.conftest import open_store
from treemail.adapters.runtime.llm import ModelReply


@settings(max_examples=budget(50))
@given(reply=REPLIES, kind=st.sampled_from(("memory", "lmdb")))
def test_whole_replies_through_the_actor(reply: ModelReply, kind: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(kind, Path(directory))
        try:
            assert_sound(run_reply(store, reply), "model replies (actor)")
        finally:
            store.close()
