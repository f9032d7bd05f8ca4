"""What the bench lines measure with: a sender/recipient pair on the engine, the runtime's
writer with many senders, the raw LMDB floor, persist-queue beside us, and fast histories."""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import lmdb

from treemail.adapters.runtime.llm import ScriptedModel
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.adapters.store.codec import encode
from treemail.adapters.store.group_commit import GroupStore
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.lmdb_txn import LmdbTables, LmdbTxn
from treemail.core import events, keys
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.ids import CountingIds
from treemail.core.keys import Table, Tally
from treemail.core.lifecycle import MessageState
from treemail.core.permissions import Rules
from treemail.core.records import (
    AgentSpec,
    Event,
    IdempotencyKey,
    Message,
    Mode,
    Owner,
    RecipientState,
    SendResult,
    Session,
    ToolContext,
)
from treemail.core.store import Store, WriteTxn

BODY = "x" * 200
# No cap gets in the way of a throughput run; the caps' own cost (a counter read) remains.
UNLIMITED = MessagingConfig(max_pending_per_session=10**9, max_inflight_per_pair=0)
SPEC = AgentSpec("bench", rules=Rules.of({"*": "allow"}))
MAP = 1 << 30


def open_store(path: Path, sync: bool, durability: str = "fsync") -> LmdbStore:
    return LmdbStore.open(path, sync=sync, map_size=MAP, max_map_size=64 * MAP,
                          durability=durability)


class Pair:
    """A running sender and a running recipient (its child) on one engine."""

    def __init__(self, store: Store, first_id: int = 1) -> None:
        self.store = store
        self.engine = Engine(store, CountingIds(start=first_id), UNLIMITED)
        self.sender = self.engine.create_root(SPEC)
        self.engine.accept(self.sender.session_id, "go", Owner.USER)
        self.run = self.engine.start_run(self.sender.session_id)
        self.recipient: Session = self.engine.delegate(self.sender.session_id, SPEC, "listen")
        self.recipient_run = self.engine.start_run(self.recipient.session_id)
        self.calls = 0

    def arguments(self) -> dict[str, str]:
        return {"to": self.recipient.session_id, "body": BODY}

    def context(self) -> ToolContext:
        self.calls += 1
        return ToolContext(self.sender.session_id, self.run.run_id, f"c{self.calls}")

    def send(self) -> None:
        self.engine.send_message(self.context(), self.arguments())

    def send_many(self, count: int, per_batch: int = 1000) -> None:
        """``count`` real sends, ``per_batch`` to a group commit (the runtime writer's path):
        fast to fill a store with pending mail."""
        group = GroupStore(self.store)
        engine = Engine(group, self.engine.ids, UNLIMITED)

        def batch(size: int) -> Callable[[], None]:
            def work() -> None:
                for _ in range(size):
                    engine.send_message(self.context(), self.arguments())
            return work

        for start in range(0, count, per_batch):
            group.batch(batch(min(per_batch, count - start)))

    def deliver(self) -> None:
        """The recipient takes everything pending at a boundary and commits the request:
        claimed at the boundary, consumed at the commit."""
        sid, rid = self.recipient.session_id, self.recipient_run.run_id
        request = self.engine.begin_request(sid, rid)
        self.engine.commit_request(sid, rid, request.request_id)


def latencies(action: Callable[[], None], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


class RawLmdb:
    """The floor: one bare write transaction per op, one put of a send's payload size."""

    def __init__(self, path: Path, sync: bool) -> None:
        self.env = lmdb.open(str(path), map_size=MAP, sync=sync, metasync=sync, max_dbs=2)
        self.db = self.env.open_db(b"raw")
        self.payload = b"y" * 700
        self.counter = 0

    def put(self) -> None:
        self.counter += 1
        with self.env.begin(write=True, db=self.db) as txn:
            txn.put(self.counter.to_bytes(8, "big"), self.payload)

    def close(self) -> None:
        self.env.close()


Write: Any = tuple[Table, bytes, bytes | None]  # (table, key, stored bytes; None deletes)


@contextmanager
def recording() -> Iterator[list[Write]]:
    """Every row the LMDB store writes while open, as it reaches LMDB: ``_to_lmdb`` is the
    store's one write seam. For a dry run only: the copy costs what it records."""
    log: list[Write] = []
    original = LmdbTables._to_lmdb

    def write(tables: LmdbTables, rows: list[tuple[bytes, bytes | None]]) -> None:
        log.extend((*keys.logical_key(stored), raw) for stored, raw in rows)
        original(tables, rows)

    with mock.patch.object(LmdbTables, "_to_lmdb", write):
        yield log


class RowsFloor:
    """The floor under a send: the very rows real sends wrote (same tables, keys, bytes and
    order), written by bare LMDB, one write transaction per send and no treemail code
    between. The rows are recorded from a dry-run twin of the measured ``Pair`` (counting
    ids: the same sequence writes the same rows), so the floor's trees grow as the measured
    store's do; its drains are replayed too, untimed, as the twin's were made."""

    def __init__(self, path: Path, sync: bool, rounds: int, per_round: int) -> None:
        self.env = lmdb.open(str(path), map_size=MAP, sync=sync, metasync=sync, max_dbs=1)
        # The store's layout: every table in one database, under ``keys.stored_key``.
        self.db = self.env.open_db(b"rows")
        self.sends: list[list[Write]] = []
        self.drains: list[list[Write]] = []
        with tempfile.TemporaryDirectory(prefix="treemail-rows-") as tmp:
            with recording() as setup:
                twin = Pair(open_store(Path(tmp), sync=False))
            for _ in range(rounds):
                for _ in range(per_round):
                    with recording() as rows:
                        twin.send()
                    self.sends.append(rows)
                with recording() as rows:
                    twin.deliver()
                self.drains.append(rows)
            twin.store.close()
        self._write(setup)
        self.sends.reverse()
        self.drains.reverse()

    def _write(self, rows: list[Write]) -> None:
        with self.env.begin(write=True, db=self.db) as txn:
            for table, key, value in rows:
                if value is None:
                    txn.delete(keys.stored_key(table, key))
                else:
                    txn.put(keys.stored_key(table, key), value)

    def send(self) -> None:
        self._write(self.sends.pop())

    def deliver(self) -> None:
        self._write(self.drains.pop())

    def close(self) -> None:
        self.env.close()


def _ack_queue(path: Path) -> Any:
    import persistqueue  # the bench extra: pip install -e '.[bench]'

    return persistqueue.SQLiteAckQueue(str(path), multithreading=True, auto_commit=True)


def pq_threads(path: Path, threads: int, per_thread: int) -> float:
    """persist-queue puts per second from ``threads`` threads at once (its defaults: WAL,
    synchronous FULL, one commit per put)."""
    queue = _ack_queue(path)
    item = {"body": BODY}
    barrier = threading.Barrier(threads + 1)

    def producer() -> None:
        barrier.wait()
        for _ in range(per_thread):
            queue.put(item)

    workers = [threading.Thread(target=producer) for _ in range(threads)]
    return threads * per_thread / released_together(workers, barrier)


def released_together(workers: list[threading.Thread], barrier: threading.Barrier) -> float:
    """Seconds from the moment ``workers``, started and waiting on ``barrier`` (sized for them
    and this caller), are let go at once, until the last of them ends: thread start-up is
    left out of the time."""
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def pq_lifecycle(path: Path, threads: int, per_thread: int) -> float:
    """persist-queue's full cycle in messages per second: ``threads`` producers putting while
    one consumer gets and acks every item (each a committed transaction)."""
    queue = _ack_queue(path)
    item = {"body": BODY}
    total = threads * per_thread

    def producer() -> None:
        for _ in range(per_thread):
            queue.put(item)

    workers = [threading.Thread(target=producer) for _ in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for _ in range(total):
        got = queue.get(block=True, timeout=30)
        queue.ack(got)
    elapsed = time.perf_counter() - start
    for worker in workers:
        worker.join()
    return total / elapsed


class Crowd:
    """``senders`` running sessions sending to one running recipient through the runtime's
    single writer, as their tool calls do."""

    def __init__(self, store: Store, senders: int) -> None:
        # Rules are read live from the agents' docs by name: the bench agent must be known.
        # Its model never runs (no session here is driven by the runtime's loop).
        agents = {SPEC.name: Agent(SPEC, ScriptedModel([]))}
        self.runtime = Runtime(store, CountingIds(), agents, UNLIMITED)
        self.senders = senders
        self.batch = 0.0
        self.calls = 0

    async def setup(self) -> None:
        rt, engine = self.runtime, self.runtime.engine
        self.root: Session = await rt.writer(engine.create_root, SPEC)
        await rt.writer(engine.accept, self.root.session_id, "go", Owner.USER)
        self.root_run = await rt.writer(engine.start_run, self.root.session_id)
        self.contexts = []
        for n in range(self.senders):
            child = await rt.writer(engine.delegate, self.root.session_id, SPEC, f"t{n}")
            run = await rt.writer(engine.start_run, child.session_id)
            self.contexts.append((child.session_id, run.run_id))

    async def _sender(self, index: int, count: int) -> None:
        rt = self.runtime
        session_id, run_id = self.contexts[index]
        arguments = {"to": self.root.session_id, "body": BODY}
        for _ in range(count):
            # A new tool call each time, across rounds too: a repeated id would be a replay.
            self.calls += 1
            ctx = ToolContext(session_id, run_id, f"s{index}-{self.calls}")
            await rt.writer(rt.engine.send_message, ctx, arguments)

    async def _consumer(self, total: int) -> None:
        """The recipient at its boundaries: claims whatever is pending, consumes it."""
        rt, sid, rid = self.runtime, self.root.session_id, self.root_run.run_id
        done = 0
        while done < total:
            request = await rt.writer(rt.engine.begin_request, sid, rid)
            await rt.writer(rt.engine.commit_request, sid, rid, request.request_id)
            done += len(request.deliveries)
            if not request.deliveries:
                await asyncio.sleep(0)

    async def sends_per_second(self, per_sender: int, consume: bool = False) -> float:
        """The rate; ``batch`` is then the mean number of calls per group commit."""
        jobs = [self._sender(i, per_sender) for i in range(self.senders)]
        if consume:
            jobs.append(self._consumer(self.senders * per_sender))
        batches = self.runtime.writer.batches
        start = time.perf_counter()
        await asyncio.gather(*jobs)
        elapsed = time.perf_counter() - start
        self.batch = self.senders * per_sender / max(self.runtime.writer.batches - batches, 1)
        return self.senders * per_sender / elapsed

    def close(self) -> None:
        self.runtime.writer.close()


def grow_history(pair: Pair, count: int, chunk: int = 20_000) -> None:
    """Write ``count`` delivered sends' worth of history from ``pair.sender`` to its recipient:
    each a consumed message, its idempotency entry, and its accepted and consumed events on
    the recipient's log and the global feed; ``chunk`` per transaction.

    Not decided by the engine (a real send, claim and consume costs far more CPU, and a
    million of them would take most of the bench's time budget), and not row by row through
    the store port either: the records are built by the code a send uses, encoded by the
    store's codec under the store's keys, and written in bulk, with the recipient's tally
    (its message and event numbers) moved on past them, one transaction per chunk. The
    rows are byte for byte those the port writes for the same records
    (tests/unit/test_bench_history.py)."""
    for start in range(0, count, chunk):
        pair.store.transact(functools.partial(_bulk_history, pair=pair,
                                              count=min(chunk, count - start)))


def _bulk_history(tx: WriteTxn, pair: Pair, count: int) -> None:
    assert isinstance(tx, LmdbTxn), "the bulk history writes LMDB rows"
    recipient = pair.recipient.session_id
    owner = keys.identity(recipient)
    tally: Tally = tx.tables.get(Table.TALLY, owner) or Tally()
    first_message = tally.counters.get("seq", 0) + 1
    rows: list[tuple[bytes, bytes]] = []
    records = history_records(pair, count, first_message, tally.last_event + 1,
                              tx.feed_end() + 1)
    for table, key, value in records:
        rows.append((keys.stored_key(table, key), encode(value, key)))
    counters = {**tally.counters, "seq": first_message + count - 1}
    tx.tables.put(Table.TALLY, owner, Tally(tally.last_event + 2 * count, counters))
    raw = tx.tables.stack[-1]
    try:
        with raw.cursor(db=tx.tables.db) as cursor:
            cursor.putmulti(rows)
        tx.tables.feed_end = None  # feed rows written behind the tables: counted again
    except lmdb.MapFullError:
        tx.tables.map_full = True  # the store grows its map and runs the chunk again
        raise



def history_records(pair: Pair, count: int, first_message: int, first_event: int,
                    first_feed: int) -> Iterator[tuple[Table, bytes, object]]:
    """The (table, key, record) of ``count`` delivered sends, numbered from the firsts given:
    what the store port's put_message, remember and two appends write for each. A history
    message's id and tool call carry its seq (live sends' ids count elsewhere)."""
    sender, recipient = pair.sender.session_id, pair.recipient.session_id
    for n in range(count):
        number = first_message + n
        accepted = Message(f"00000000-0000-4000-8000-{number:012d}", recipient, sender,
                           Owner.AGENT, BODY, Mode.QUEUE, 1, number)
        consumed = attrs.evolve(accepted, state=MessageState.CONSUMED)
        yield Table.MESSAGES, keys.identity(consumed.message_id), consumed
        yield (Table.REPLAY, keys.replay(IdempotencyKey(sender, pair.run.run_id, f"h{number}")),
               SendResult(accepted.message_id, Mode.QUEUE, RecipientState.RUNNING))
        for offset, message in enumerate((accepted, consumed)):
            seq = first_event + 2 * n + offset
            payload = events.message_payload(message)
            key = keys.event(recipient, seq)
            yield Table.EVENTS, key, Event(recipient, seq, payload.KIND.value,
                                           events.encode(payload))
            yield Table.FEED, keys.feed(first_feed + 2 * n + offset), key


def peak_rss_kib() -> int:
    """This process's peak resident set (VmHWM). Not ``ru_maxrss``: Linux carries that over
    from the parent across fork and exec, so a child would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status: peak RSS needs Linux")


def cpu_per_op(action: Callable[[], None], count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        action()
    return (time.process_time() - start) / count


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


def env_note() -> dict[str, object]:
    return {"cpus": os.cpu_count(), "lmdb": lmdb.version()}


@contextmanager
def durable_postgres(line: str) -> Iterator[Any]:
    """A throwaway durable PostgreSQL server for bench line ``line``, stopped afterwards; None
    (and the line said to be left out, with why) where psycopg or the server's binaries are
    missing."""
    import sys

    try:
        from treemail.testing.postgres import PostgresCluster, PostgresMissing
    except ImportError as exc:  # pragma: no cover - psycopg is in the dev extra
        print(f"bench ({line}): left out, {exc}", file=sys.stderr)
        yield None
        return
    try:
        server = PostgresCluster.start(durable=True)
    except PostgresMissing as missing:
        print(f"bench ({line}): left out, {missing}", file=sys.stderr)
        yield None
        return
    try:
        yield server
    finally:
        server.stop()
