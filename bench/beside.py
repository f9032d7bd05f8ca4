"""(o): treemail beside persist-queue and PostgreSQL, every figure interleaved in chunks.

The disk's flush time on a shared machine swings several-fold within a minute, so figures
measured one after the other are not comparable, even in alternating rounds. Here every
figure runs a chunk of about ``CHUNK`` operations in turn within each round, the order
reversed every other round, and each figure is the median of its chunks: a swing reaches
all of them alike.

The figures, each one durable commit per operation (sync on):

* sequential: a treemail send (LMDB, fsync mode); bare LMDB writing the very rows the send
  wrote (``RowsFloor``); a persist-queue put; a PostgreSQL ``INSERT`` and its commit
  (``synchronous_commit`` on);
* the sequential full lifecycle: a send, then the recipient's claim at a boundary and its
  consume at the commit; persist-queue's put, get and ack; PostgreSQL's ``INSERT``, then a
  consumer's ``DELETE`` of the oldest row picked with ``FOR UPDATE SKIP LOCKED``;
* 32 at once: 32 senders through the runtime's writer (group commit) against 32
  PostgreSQL connections each committing one ``INSERT`` at a time; and the same with a
  consumer beside them (treemail's recipient claiming and consuming, PostgreSQL's
  ``SKIP LOCKED`` deleter).

Beside them, what limits the sequential figures: the pages one commit writes (a send's
against a one-row put's; see ``pinned``) and the flushes per send. Without the
server's binaries or psycopg the PostgreSQL figures are left out and the line says why;
the rest still runs.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from bench.lines import SENDERS, Line, Scale
from bench.rigs import (
    Crowd,
    Pair,
    RawLmdb,
    RowsFloor,
    _ack_queue,
    durable_postgres,
    median,
    open_store,
    released_together,
    run_async,
)

__all__ = ["CHUNK", "beside_lines", "load_average", "pages_per_send", "pinned"]

CHUNK = 25
LMDB_FLUSHES = 2.0  # per commit in the default fsync mode: the data pages, then the meta
BODY = "x" * 200


def load_average() -> float:
    """The one-minute load average: recorded before and after the run, so that a reader
    knows how busy the machine was while the ratios were taken."""
    return os.getloadavg()[0]


@contextmanager
def pinned(env: lmdb.Environment) -> Iterator[Callable[[], int]]:
    """Hold a read transaction open on ``env`` from now on, and yield a counter of the pages
    written since.

    LMDB reuses a page only once no reader can still see it. With a reader open from before
    the first write, no page is ever reused: each page a commit dirties (the leaves and
    branches it changed, the database records, the free list's own pages) is a new page past
    the file's last, so the growth of ``last_pgno`` counts them exactly. LMDB's ``info``
    gives the number; nothing is estimated."""
    with env.begin() as pin:
        first = env.info()["last_pgno"]
        yield lambda: int(env.info()["last_pgno"]) - first
        pin.abort()


class _Pg:
    """PostgreSQL's bare queue on the throwaway durable server: one table, a bigserial id
    and the body, each operation its own committed transaction."""

    def __init__(self, url: str) -> None:
        import psycopg

        from treemail.adapters.store.postgres_store import split_url

        self.conninfo, _ = split_url(url)
        self.conn = psycopg.connect(self.conninfo)
        self.conn.execute("CREATE TABLE IF NOT EXISTS beside_queue "
                          "(id bigserial PRIMARY KEY, body text NOT NULL)")
        self.conn.commit()
        self.conns = [psycopg.connect(self.conninfo) for _ in range(SENDERS)]

    @staticmethod
    def insert(conn: Any) -> None:
        conn.execute("INSERT INTO beside_queue (body) VALUES (%s)", (BODY,))
        conn.commit()

    @staticmethod
    def take(conn: Any) -> bool:
        """The consumer: delete the oldest row no other consumer holds; False if none."""
        row = conn.execute(
            "DELETE FROM beside_queue WHERE id = (SELECT id FROM beside_queue ORDER BY id "
            "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING body").fetchone()
        conn.commit()
        return row is not None

    def put(self) -> None:
        self.insert(self.conn)

    def cycle(self) -> None:
        self.insert(self.conn)
        self.take(self.conn)

    def crowd(self, each: int, consume: bool) -> float:
        """Operations per second of ``SENDERS`` connections inserting ``each`` at once (and
        with ``consume``, a consumer on its own connection deleting every one of them)."""
        total = SENDERS * each
        barrier = threading.Barrier(SENDERS + 1 + consume)

        def producer(conn: Any) -> None:
            barrier.wait()
            for _ in range(each):
                self.insert(conn)

        def consumer() -> None:
            barrier.wait()
            taken = 0
            while taken < total:
                taken += self.take(self.conn)

        workers = [threading.Thread(target=producer, args=(c,)) for c in self.conns]
        if consume:
            workers.append(threading.Thread(target=consumer))
        return total / released_together(workers, barrier)

    def close(self) -> None:
        for conn in [self.conn, *self.conns]:
            conn.close()


class _Pq:
    """persist-queue's ack queue, its defaults (WAL, synchronous FULL, a commit per put)."""

    def __init__(self, path: Path) -> None:
        self.queue = _ack_queue(path)
        self.item = {"body": BODY}

    def put(self) -> None:
        self.queue.put(self.item)

    def cycle(self) -> None:
        self.queue.put(self.item)
        self.queue.ack(self.queue.get(block=False))


def _per_op(action: Callable[[], None], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        action()
    return (time.perf_counter() - start) / count


def beside_lines(root: Path, scale: Scale) -> list[Line]:
    with durable_postgres("o") as server:
        return _measure(root, scale, server)


def _measure(root: Path, scale: Scale, server: Any) -> list[Line]:
    rounds = max(scale.sequential // 50, 3)
    send = Pair(open_store(root / "o-send", sync=True))
    cycle = Pair(open_store(root / "o-cycle", sync=True))
    floor = RowsFloor(root / "o-rows", sync=True, rounds=rounds, per_round=CHUNK)
    pq, pq_cycle = _Pq(root / "o-pq"), _Pq(root / "o-pq-cycle")
    crowd = Crowd(open_store(root / "o-crowd", sync=True), SENDERS)
    run_async(crowd.setup())
    pg = _Pg(server.url(schema="beside")) if server is not None else None
    each = 2  # per sender and chunk: 64 sends, about a chunk's worth each way

    def send_and_deliver() -> None:
        cycle.send()
        cycle.deliver()

    def floor_chunk() -> float:
        took = _per_op(floor.send, CHUNK)
        floor.deliver()
        return took

    def sends_chunk() -> float:
        took = _per_op(send.send, CHUNK)
        send.deliver()  # the recipient reads now and then, so its inbox stays realistic
        return took

    figures: dict[str, Callable[[], float]] = {
        "send": sends_chunk,
        "rows": floor_chunk,
        "pq_put": lambda: _per_op(pq.put, CHUNK),
        "cycle": lambda: _per_op(send_and_deliver, CHUNK),
        "pq_cycle": lambda: _per_op(pq_cycle.cycle, CHUNK),
        "crowd": lambda: 1 / run_async(crowd.sends_per_second(each)),
        "crowd_cycle": lambda: 1 / run_async(crowd.sends_per_second(each, consume=True)),
    }
    if pg is not None:
        figures |= {
            "pg_put": lambda: _per_op(pg.put, CHUNK),
            "pg_cycle": lambda: _per_op(pg.cycle, CHUNK),
            "pg_crowd": lambda: 1 / pg.crowd(each, consume=False),
            "pg_crowd_cycle": lambda: 1 / pg.crowd(each, consume=True),
        }
    took: dict[str, list[float]] = {name: [] for name in figures}
    order = list(figures)
    for n in range(rounds):
        for name in order if n % 2 == 0 else reversed(order):
            took[name].append(figures[name]())
    t = {name: median(times) for name, times in took.items()}
    batch = crowd.batch
    for each_store in (send.store, cycle.store, floor):
        each_store.close()
    crowd.close()
    if pg is not None:
        pg.close()
    pages = pages_per_send(root)
    us = 1e6
    lines = [
        Line("o_send_pq", "(o) sequential durable send, median of chunks", t["send"] * us,
             t["pq_put"] * us, "µs", "persist-queue put, interleaved", "<= 1.5x",
             t["send"] <= 1.5 * t["pq_put"]),
        Line("o_send_rows", "(o) sequential durable send, median of chunks", t["send"] * us,
             t["rows"] * us, "µs", "bare LMDB writing the same rows", "<= 1.3x",
             t["send"] <= 1.3 * t["rows"]),
        Line("o_cycle_pq", "(o) sequential lifecycle, per message", t["cycle"] * us,
             t["pq_cycle"] * us, "µs", "persist-queue put+get+ack", "-", None),
        Line("o_pages", "(o) pages written per commit, a send", pages[0], pages[1], "pg",
             "raw LMDB 1-put txn", "-", None),
        # LMDB's fsync mode flushes twice per commit (the data pages, then the meta page;
        # see durability.py), so the flushes per send are twice the commits per send.
        Line("o_flushes", "(o) flushes per send, 32 senders", LMDB_FLUSHES / max(batch, 1),
             LMDB_FLUSHES, "", "a sequential send (one commit)", "-", None),
    ]
    if pg is not None:
        lines[2:2] = [
            Line("o_send_pg", "(o) sequential durable send, median of chunks",
                 t["send"] * us, t["pg_put"] * us, "µs", "PostgreSQL INSERT+commit, sync on",
                 "-", None),
            Line("o_cycle_pg", "(o) sequential lifecycle, per message", t["cycle"] * us,
                 t["pg_cycle"] * us, "µs", "PostgreSQL INSERT; SKIP LOCKED DELETE", "-", None),
            Line("o_crowd_pg", f"(o) 32 senders, sends/s ({batch:.0f}/commit)",
                 1 / t["crowd"], 1 / t["pg_crowd"], "/s", "PostgreSQL, 32 connections INSERT",
                 ">= 1x", t["crowd"] <= t["pg_crowd"]),
            Line("o_crowd_cycle_pg", "(o) 32 senders + consumer, msgs/s",
                 1 / t["crowd_cycle"], 1 / t["pg_crowd_cycle"], "/s",
                 "PostgreSQL 32 INSERT + SKIP LOCKED DELETE", ">= 1x",
                 t["crowd_cycle"] <= t["pg_crowd_cycle"]),
        ]
    return lines


def pages_per_send(root: Path) -> tuple[float, float]:
    """Pages per commit of a send (sync off: pages, not flushes, are counted) and of the
    raw one-put transaction, each on a store of its own, pinned from its first write."""
    sends = 100
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        store = open_store(Path(tmp) / "send", sync=False)
        with pinned(store._env) as written:
            pair = Pair(store)
            for _ in range(4):  # some history, so the trees are past their first pages
                for _ in range(CHUNK):
                    pair.send()
                pair.deliver()
            before = written()
            for _ in range(sends):
                pair.send()
            per_send = (written() - before) / sends
        store.close()
        raw = RawLmdb(Path(tmp) / "raw", sync=False)
        with pinned(raw.env) as written:
            for _ in range(4 * CHUNK):
                raw.put()
            before = written()
            for _ in range(sends):
                raw.put()
            per_put = (written() - before) / sends
        raw.close()
    return per_send, per_put
