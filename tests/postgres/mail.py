"""What the failover and restart tests check at the end: every acknowledged send was
delivered, each exactly once, and no other user mail exists (nothing duplicated)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Mapping

from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.store.factory import open_store
from treemail.core.engine import Engine
from treemail.core.events import EventKind
from treemail.core.lifecycle import MessageState
from treemail.core.records import Owner


def delivered_once(url: str, sent: Mapping[str, Collection[str]],
                   timeout: float = 180.0) -> None:
    """Wait until every message of ``sent`` (tree -> message ids) is consumed, then check
    each was consumed exactly once and each tree holds no other user mail. The timeout is
    generous: a loaded machine runs the daemons' scripted model slowly."""
    engine = Engine(open_store(url, readonly=True), UuidIds())
    try:
        deadline = time.monotonic() + timeout
        while True:
            waiting = {m: engine.message(m).state for ids in sent.values() for m in ids
                       if engine.message(m).state is not MessageState.CONSUMED}
            if not waiting:
                break
            assert time.monotonic() < deadline, waiting
            time.sleep(0.2)
        for tree, ids in sent.items():
            assert len(set(ids)) == len(ids)  # one message a send
            assert engine.pending(tree) == []
            consumed = Counter(str(e.data["message_id"]) for e in engine.events(tree)
                               if e.kind == EventKind.PRODUCER_MESSAGE_CONSUMED)
            user = {m for m in consumed if engine.message(m).owner is Owner.USER}
            assert user == set(ids), (tree, consumed)  # no mail but what was acknowledged
            assert all(consumed[m] == 1 for m in ids), consumed  # each delivered once
    finally:
        engine.store.close()
