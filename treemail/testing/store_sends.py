"""``SendContract``: a Store's send-specific operations, part of ``StoreContract``.

``mail_counts`` reads what the general ``count`` reads, and ``accept_mail`` leaves the store
exactly as the general writes it stands for (``put_message``, three ``add``, ``append``,
``remember``) leave a twin store of the same kind: a backend may write a send its own way,
never other rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treemail.core import keys
from treemail.core.events import EventKind
from treemail.core.keys import CounterName
from treemail.core.records import (
    IdempotencyKey,
    Message,
    Mode,
    Owner,
    RecipientState,
    SendResult,
)
from treemail.core.store import ReadTxn, Store, WriteTxn
from treemail.testing.store_sample import (
    CHILD,
    GHOST,
    MESSAGE_IDS,
    ROOT,
    RUN_IDS,
    Boom,
    StoreHarness,
    populate,
    snapshot,
)

__all__ = ["SendContract"]

KIND = EventKind.PRODUCER_MESSAGE_ACCEPTED.value


def _mail(n: int, recipient: str, sender: str, seq: int) -> tuple[Message, dict[str, object],
                                                                  IdempotencyKey, SendResult]:
    mid = MESSAGE_IDS[3 + n]
    mail = Message(mid, recipient, sender, Owner.AGENT, f"mail {n} ✓", Mode.STEER, n + 1, seq,
                   aged=12.5 if n else None)
    data: dict[str, object] = {"message_id": mid, "owner": "agent", "sender": sender,
                               "run_id": None, "request_id": None, "mode": "steer",
                               "agent_hop": n + 1, "body": mail.body}
    key = IdempotencyKey(sender, RUN_IDS[0], f"send-{n}")
    return mail, data, key, SendResult(mid, Mode.QUEUE, RecipientState.QUEUED, f"digest {n}")


def _general(tx: WriteTxn, mail: Message, data: dict[str, object], key: IdempotencyKey,
             result: SendResult) -> None:
    """What ``accept_mail`` stands for, through the general port."""
    assert mail.sender is not None
    tx.put_message(mail)
    tx.add(keys.seq_counter(mail.recipient), 1)
    tx.add(keys.inbox_counter(mail.recipient), 1)
    tx.add(keys.pair_counter(mail.sender, mail.recipient), 1)
    tx.append(mail.recipient, KIND, data)
    tx.remember(key, result)


def _sends(tx: WriteTxn, general: bool) -> None:
    """Three sends into ``populate``'s world: to CHILD (which holds mail and counts), a second
    one from another sender, and to GHOST (nothing counted yet); between them GHOST's inbox
    count is taken to -1, so that its send brings it to 0, which is not kept."""
    tx.add(keys.seq_counter(CHILD), 2)  # populate's mail to CHILD holds seqs 1 and 2
    tx.add(keys.inbox_counter(GHOST), -1)
    for n, (recipient, sender) in enumerate(((CHILD, ROOT), (CHILD, GHOST), (GHOST, ROOT))):
        counts = tx.mail_counts(recipient, sender)
        mail, data, key, result = _mail(n, recipient, sender, counts[0] + 1)
        if general:
            _general(tx, mail, data, key, result)
        else:
            tx.accept_mail(mail, KIND, data, key, result, counts)


def _shown(tx: ReadTxn) -> dict[str, Any]:
    names = [keys.seq_counter(s) for s in (CHILD, GHOST)] + [
        keys.inbox_counter(GHOST), keys.pair_counter(GHOST, CHILD)]
    return {**snapshot(tx), "feed": list(tx.feed()), "feed_end": tx.feed_end(),
            "more counts": {name: tx.count(name) for name in names},
            "mail counts": [tx.mail_counts(r, s) for r in (CHILD, GHOST, ROOT)
                            for s in (ROOT, GHOST)],
            "keys": [tx.recall(IdempotencyKey(s, RUN_IDS[0], f"send-{n}"))
                     for n in range(3) for s in (ROOT, GHOST)]}


class SendContract(StoreHarness):
    def test_mail_counts_read_the_seq_inbox_and_pair_counters(self, store: Store) -> None:
        store.transact(populate)
        store.transact(lambda tx: tx.add(keys.seq_counter(CHILD), 6))
        with store.read() as tx:
            assert tx.mail_counts(CHILD, ROOT) == (6, 2, 1)
            assert tx.mail_counts(CHILD, GHOST) == (6, 2, 0)  # no mail from GHOST
            assert tx.mail_counts(ROOT, CHILD) == (0, 0, 0)  # the pair is directed
            assert tx.mail_counts("no such session", ROOT) == (0, 0, 0)
            assert tx.mail_counts("", ROOT) == (0, 0, 0)  # an id no store could key

    def test_accept_mail_stores_what_the_general_writes_store(
        self, store: Store, directory: Path
    ) -> None:
        twin = self.make_store(directory.parent / "general")
        try:
            store.transact(populate)
            store.transact(lambda tx: _sends(tx, general=False))
            twin.transact(populate)
            twin.transact(lambda tx: _sends(tx, general=True))
            with store.read() as tx, twin.read() as expected:
                assert _shown(tx) == _shown(expected)
            assert self.counter_names(store) == self.counter_names(twin)
            with store.read() as tx:  # the sends are there, counted
                assert tx.mail_counts(CHILD, ROOT) == (4, 4, 2)
                assert tx.mail_counts(GHOST, ROOT) == (1, 0, 1)
        finally:
            twin.close()

    def test_accept_mail_in_a_failed_savepoint_leaves_nothing(self, store: Store) -> None:
        store.transact(populate)

        mail, data, key, result = _mail(0, CHILD, ROOT, 3)

        def work(tx: WriteTxn) -> None:
            before = snapshot(tx), list(tx.feed()), tx.mail_counts(CHILD, ROOT)
            try:
                with tx.savepoint() as inner:
                    inner.accept_mail(mail, KIND, data, key, result, before[2])
                    assert inner.mail_counts(CHILD, ROOT) == (3, 3, 2)
                    raise Boom
            except Boom:
                pass
            assert (snapshot(tx), list(tx.feed()), tx.mail_counts(CHILD, ROOT)) == before
            tx.add(CounterName("after"), 1)

        store.transact(work)
        with store.read() as tx:
            assert tx.message(MESSAGE_IDS[3]) is None
            assert tx.feed_end() == 2
