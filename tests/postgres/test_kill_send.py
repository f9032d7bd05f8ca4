"""A process SIGKILLed in the middle of a send on a PostgreSQL store.

The server rolls back the transaction of a connection that dies: the store is as it was, or
the send is there whole (message, pending entry, events, replay entry), never part of it.
Sent again with the same idempotency key (the tool call), a send is stored once: the retry
of a send that was stored is answered with the first message.

Real worker processes (``tests.postgres.send_worker``) on the session's throwaway server.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.crash.worker import CHILDREN, CONFIG, ROOT
from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.store.factory import open_store
from treemail.adapters.store.postgres_store import PostgresStore
from treemail.core.engine import Engine
from treemail.core.errors import StoreLocked
from treemail.core.events import EventKind
from treemail.core.keys import Table
from treemail.core.records import IdempotencyKey, Owner, ToolContext
from treemail.testing.postgres import PostgresCluster

KILLS = 5


@contextmanager
def _writer(url: str) -> Iterator[Engine]:
    """An engine on the store, once a killed writer's session has let go of it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            store = open_store(url)
            break
        except StoreLocked:  # the server is still ending the killed process's session
            assert time.monotonic() < deadline, "the killed writer's lock stayed held"
            time.sleep(0.05)
    try:
        yield Engine(store, UuidIds(), CONFIG)
    finally:
        store.close()


def _tree(url: str) -> list[str]:
    """A root with a run in flight and a child to send to: the worker's arguments."""
    with _writer(url) as engine:
        root = engine.create_root(ROOT).session_id
        child = engine.delegate(root, CHILDREN[3], "the task")
        engine.accept(root, "go", Owner.USER)
        run = engine.start_run(root).run_id
    return [root, run, child.handle or "", child.session_id]


def _rows(url: str) -> dict[str, list[tuple[bytes, bytes]]]:
    store = open_store(url, readonly=True)
    assert isinstance(store, PostgresStore)
    try:
        with store.raw_rows() as rows:
            return {table.value: list(rows(table)) for table in Table}
    finally:
        store.close()


def _worker(url: str, tree: list[str], mode: str, first: int) -> subprocess.Popen[str]:
    root, run, handle, _ = tree
    return subprocess.Popen(
        [sys.executable, "-m", "tests.postgres.send_worker", url, root, run, handle, mode,
         str(first)], stdout=subprocess.PIPE, text=True)


def _kill(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    assert worker.returncode == -signal.SIGKILL, worker.returncode


def _sent(url: str, tree: list[str], n: int) -> tuple[str | None, int]:
    """What the store holds of send ``n``: the message its key replays to (None: the key
    is unknown), and how many messages with its body the child's log accepted."""
    root, run, _, child = tree
    engine = Engine(open_store(url, readonly=True), UuidIds(), CONFIG)
    try:
        with engine.store.read() as tx:
            replay = tx.recall(IdempotencyKey.of(ToolContext(root, run, f"call-{n}")))
            accepted = [e for e in tx.events(child)
                        if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                        and e.data["body"] == f"note {n}"]
            if replay is not None:  # whole: the message, its event, its pending entry
                assert [str(e.data["message_id"]) for e in accepted] == [replay.message_id]
                assert replay.message_id in {m.message_id for m in tx.pending(child)}
        return (None if replay is None else replay.message_id), len(accepted)
    finally:
        engine.store.close()


def test_a_writer_killed_inside_its_send_transaction_leaves_the_store_as_it_was(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url()
    tree = _tree(url)
    before = _rows(url)
    worker = _worker(url, tree, "hang", 1)
    assert worker.stdout is not None
    assert worker.stdout.readline() == "ready\n"  # the send's rows are on the server
    _kill(worker)
    assert _rows(url) == before  # not one row of it committed
    assert _sent(url, tree, 1) == (None, 0)
    root, run, handle, _ = tree
    with _writer(url) as engine:  # sent again, twice, with the same key: stored once
        ctx = ToolContext(root, run, "call-1")
        first = engine.send_message(ctx, {"to": handle, "body": "note 1"}).message_id
        again = engine.send_message(ctx, {"to": handle, "body": "note 1"}).message_id
    assert first == again
    assert _sent(url, tree, 1) == (first, 1)


def test_writers_killed_at_random_store_each_send_whole_or_not_at_all_and_retries_once(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url()
    tree = _tree(url)
    rng = random.Random(20261203)
    acked: dict[int, str] = {}
    whole = nothing = 0
    for _ in range(KILLS):
        first = max(acked, default=0) + 1  # the first send never acknowledged, again
        worker = _worker(url, tree, "loop", first)
        assert worker.stdout is not None
        line = worker.stdout.readline()  # at least one send acknowledged
        time.sleep(rng.uniform(0.03, 0.3))
        _kill(worker)
        for ack in [line, *worker.stdout.read().splitlines()]:
            word, number, message_id = ack.split()
            assert word == "ack"
            acked[int(number)] = message_id
        for n, message_id in acked.items():  # every acknowledged send is stored, once
            assert _sent(url, tree, n) == (message_id, 1)
        in_flight = _sent(url, tree, max(acked) + 1)  # the send the kill cut short
        assert in_flight[1] == (0 if in_flight[0] is None else 1)
        whole, nothing = whole + (in_flight[0] is not None), nothing + (in_flight[0] is None)
    last = max(acked) + 1
    root, run, handle, _ = tree
    with _writer(url) as engine:  # the cut-short send retried: once, whatever it left
        retried = engine.send_message(ToolContext(root, run, f"call-{last}"),
                                      {"to": handle, "body": f"note {last}"}).message_id
    assert _sent(url, tree, last) == (retried, 1)
    print(f"{KILLS} kills: {len(acked)} sends acknowledged, each stored once; the send cut "
          f"short was whole {whole} times and absent {nothing} times")
