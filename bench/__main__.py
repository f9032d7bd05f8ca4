"""treemail benchmarks, each a ratio against a baseline measured in the same run.

* send vs raw LMDB: a full send_message (guards, idempotency index, message, counters and
  event-log append, one durable commit) against one bare LMDB write transaction of the same
  payload size and the same sync setting. The ratio is treemail's overhead over the storage
  floor on this machine.
* history: the cost of a send after a long history against the cost on an empty store.
  The indexes are keyed so that this stays near 1.0.
* memory: the Python heap after many sends against after a few; the engine keeps nothing in
  memory per message, so this stays near 1.0 (no growth).

Usage: python -m bench [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import lmdb

from treemail.adapters import codec
from treemail.adapters.lmdb_store import LmdbStore
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.ids import CountingIds
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Run, Session, ToolContext

BODY = "x" * 200
UNLIMITED = MessagingConfig(max_pending_per_session=10**9, max_inflight_per_pair=0)


class Bench:
    def __init__(self, path: Path, sync: bool) -> None:
        self.store = LmdbStore.open(path, sync=sync, map_size=256 << 20)
        self.engine = Engine(self.store, CountingIds(), UNLIMITED)
        spec = AgentSpec("bench", rules=Rules.of({"*": "allow"}))
        self.sender = self.engine.create_root(spec)
        self.engine.produce(self.sender.session_id, "go", _user())
        self.run = self.engine.start_run(self.sender.session_id)
        self.recipient = self.engine.delegate(self.sender.session_id, spec, "listen")
        self.recipient_run = self.engine.start_run(self.recipient.session_id)
        self.calls = 0

    def send(self) -> None:
        self.calls += 1
        ctx = ToolContext(self.sender.session_id, self.run.run_id, f"c{self.calls}")
        self.engine.send_message(ctx, {"to": self.recipient.session_id, "body": BODY})

    def deliver(self) -> None:
        """The recipient reads everything pending: keeps the inbox small, history growing."""
        session: Session = self.recipient
        run: Run = self.recipient_run
        request = self.engine.begin_request(session.session_id, run.run_id)
        self.engine.commit_request(session.session_id, run.run_id, request.request_id)


def _user() -> object:
    from treemail.core.records import Owner

    return Owner.USER


def per_op(action: Callable[[], None], count: int, repeats: int = 5) -> float:
    """Seconds per call: the best of ``repeats`` timed batches, after one warm-up batch,
    so that a stray scheduler hiccup on a shared machine does not become a ratio."""
    best = float("inf")
    for attempt in range(repeats + 1):
        start = time.perf_counter()
        for _ in range(count):
            action()
        if attempt:
            best = min(best, (time.perf_counter() - start) / count)
    return best


def raw_lmdb(path: Path, sync: bool, count: int) -> float:
    """The floor: one bare write transaction per op, payload the size of a send's writes."""
    env = lmdb.open(str(path), map_size=256 << 20, sync=sync, metasync=sync, max_dbs=4)
    db = env.open_db(b"raw")
    payload = b"y" * 700

    def op(counter: list[int] = [0]) -> None:  # noqa: B006 - a cheap mutable counter
        counter[0] += 1
        with env.begin(write=True, db=db) as txn:
            txn.put(counter[0].to_bytes(8, "big"), payload)

    cost = per_op(op, count)
    env.close()
    return cost


def send_vs_raw(root: Path, sync: bool, count: int) -> None:
    bench = Bench(root / f"send-{sync}", sync)

    def send() -> None:
        # The recipient reads its mail now and then, as a live agent would, so the inbox
        # stays at a realistic size instead of growing without bound.
        bench.send()
        if bench.calls % 16 == 0:
            bench.deliver()

    cost = per_op(send, count)
    base = raw_lmdb(root / f"raw-{sync}", sync, count)
    label = "durable (sync)" if sync else "no sync"
    print(f"send_message, {label:<14} {cost * 1e6:9.1f} µs/op   raw LMDB txn "
          f"{base * 1e6:9.1f} µs/op   ratio {cost / base:5.2f}x")
    bench.store.close()


def history(root: Path, count: int, past: int) -> None:
    bench = Bench(root / "history", sync=False)

    def cycle() -> None:
        bench.send()
        bench.deliver()

    early = per_op(cycle, count)
    for _ in range(past):
        cycle()
    late = per_op(cycle, count)
    print(f"send+deliver after {past + count:>6} messages of history vs on a fresh store: "
          f"{late * 1e6:7.1f} vs {early * 1e6:7.1f} µs   ratio {late / early:5.2f}x")
    bench.store.close()


def memory(root: Path, count: int) -> None:
    """Heap in use after ``count`` sends against after ``4 * count``: the engine and the
    store's bounded decode cache hold nothing per message, so the ratio stays near 1.0."""
    bench = Bench(root / "memory", sync=False)

    def cycles(n: int) -> None:
        for _ in range(n):
            bench.send()
            bench.deliver()

    def heap() -> int:
        # The decode cache is bounded (codec._SHARED_LIMIT entries) and refills within a few
        # sends; emptying it before each reading keeps its sawtooth out of the ratio.
        codec._shared.clear()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    cycles(count)
    early = heap()
    cycles(3 * count)
    late = heap()
    tracemalloc.stop()
    print(f"Python heap after {4 * count} vs {count} sends: {late / 1024:8.1f} vs "
          f"{early / 1024:8.1f} KiB   ratio {late / early:5.2f}x")
    bench.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    args = parser.parse_args()
    scale = 1 if args.quick else 10
    with tempfile.TemporaryDirectory(prefix="treemail-bench-") as tmp:
        root = Path(tmp)
        send_vs_raw(root, sync=True, count=10 * scale)
        send_vs_raw(root, sync=False, count=100 * scale)
        history(root, count=50 * scale, past=2000 * scale)
        memory(root, count=1500 * scale)


if __name__ == "__main__":
    main()
