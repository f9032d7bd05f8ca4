"""The bench's bulk history (``bench.rigs.grow_history``) writes exactly the rows the store
port writes for the same delivered sends, so lines (d), (e) and (f) measure a store real
traffic could have left, and ``treemail verify`` finds it sound."""

from __future__ import annotations

import io
from pathlib import Path

from bench.rigs import Pair, grow_history, history_records
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.verify import main as verify_main
from treemail.core import events, keys
from treemail.core.keys import Table
from treemail.core.records import Event, IdempotencyKey, Message, SendResult
from treemail.core.store import WriteTxn


def through_the_port(pair: Pair, count: int) -> None:
    """The same history, each record written by the store port."""

    def work(tx: WriteTxn) -> None:
        recipient = pair.recipient.session_id
        first = tx.add(keys.seq_counter(recipient), count) - count + 1
        for _, _, record in history_records(pair, count, first, 0, 0):
            if isinstance(record, Message):
                tx.put_message(record)
            elif isinstance(record, SendResult):
                tx.remember(_replay_key(pair, record), record)
            elif isinstance(record, Event):
                payload = events.read(record)
                assert not isinstance(payload, events.UnknownEvent)
                tx.append(recipient, record.kind, events.encode(payload))

    pair.store.transact(work)


def _replay_key(pair: Pair, result: SendResult) -> IdempotencyKey:
    number = int(result.message_id.rsplit("-", 1)[1])
    return IdempotencyKey(pair.sender.session_id, pair.run.run_id, f"h{number}")


def raw(store: LmdbStore) -> dict[Table, list[tuple[bytes, bytes]]]:
    with store.raw_rows() as rows:
        return {table: [(bytes(k), bytes(v)) for k, v in rows(table)] for table in Table}


def test_bulk_history_is_the_rows_the_port_writes(tmp_path: Path) -> None:
    bulk_store = LmdbStore.open(tmp_path / "bulk", sync=False)
    port_store = LmdbStore.open(tmp_path / "port", sync=False)
    bulk, port = Pair(bulk_store), Pair(port_store)
    grow_history(bulk, 250, chunk=100)  # chunks continue each other's numbers
    for _ in range(2):
        through_the_port(port, 125)
    bulk.send()  # and a live send goes on from there alike
    port.send()
    assert raw(bulk_store) == raw(port_store)
    for pair in (bulk, port):
        pair.store.close()
    out = io.StringIO()
    assert verify_main(str(tmp_path / "bulk"), out, out) == 0, out.getvalue()
