"""The bench lines (a) to (g) of the performance issue, each a ratio against a baseline run
beside it in the same process (or, for memory, in sibling subprocesses)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from bench.rigs import (
    UNLIMITED,
    Crowd,
    Pair,
    RawLmdb,
    RowsFloor,
    cpu_per_op,
    grow_history,
    latencies,
    median,
    open_store,
    pq_lifecycle,
    pq_threads,
    quantile,
    run_async,
)
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.engine import Engine
from treemail.core.ids import CountingIds


@attrs.frozen
class Line:
    """One row: ``value`` against ``baseline`` (same unit), their ratio, and the target."""

    key: str
    what: str
    value: float
    baseline: float
    unit: str
    base_label: str
    target: str
    met: bool | None

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")


@attrs.frozen
class Scale:
    """How much each line does; ``quick`` for a smoke run under a minute."""

    sequential: int
    per_sender: int
    histories: tuple[int, ...]
    probe: int
    pending: int
    cpu: int

    @classmethod
    def of(cls, quick: bool) -> Scale:
        if quick:
            return cls(150, 10, (1_000, 10_000, 50_000), 200, 5_000, 500)
        return cls(600, 50, (1_000, 100_000, 1_000_000), 500, 100_000, 3000)


SENDERS = 32


def sequential(root: Path, scale: Scale) -> list[Line]:
    """(a): durable send latency against the raw single-put LMDB sync txn, and the process
    durability mode against the default fsync mode; interleaved in rounds so a noisy
    neighbour hits all alike. Beside them, bare LMDB writing the very rows the sends wrote:
    what a send's rows cost the disk, apart from what treemail's code adds."""
    rounds = scale.sequential // 50
    pair = Pair(open_store(root / "a-send", sync=True))
    light = Pair(open_store(root / "a-process", sync=True, durability="process"))
    raw = RawLmdb(root / "a-raw", sync=True)
    rows = RowsFloor(root / "a-rows", sync=True, rounds=rounds, per_round=50)
    sends: list[float] = []
    lights: list[float] = []
    puts: list[float] = []
    floors: list[float] = []
    for _ in range(rounds):
        sends += latencies(pair.send, 50)
        pair.deliver()  # the recipient reads now and then, so its inbox stays realistic
        lights += latencies(light.send, 50)
        light.deliver()
        puts += latencies(raw.put, 50)
        floors += latencies(rows.send, 50)
        rows.deliver()
    for each in (pair.store, light.store, raw, rows):
        each.close()
    lines = []
    for q, name, goal in ((0.5, "p50", 1.5), (0.99, "p99", None)):
        ours, floor = quantile(sends, q), quantile(puts, q)
        target = f"<= {goal}x (stretch 1.3x)" if goal else "-"
        lines.append(Line(f"a_{name}", f"(a) sequential durable send, {name}", ours * 1e6,
                          floor * 1e6, "µs", "raw LMDB 1-put sync txn", target,
                          ours / floor <= goal if goal else None))
    ours, floor = quantile(sends, 0.5), quantile(floors, 0.5)
    lines += [
        Line("a_process", "(a) sequential send, process mode, p50",
             quantile(lights, 0.5) * 1e6, ours * 1e6, "µs", "the same send in fsync mode",
             "< 1x", quantile(lights, 0.5) < ours),
        Line("a_rows", "(a) bare LMDB writing a send's rows, p50", floor * 1e6,
             quantile(puts, 0.5) * 1e6, "µs", "raw LMDB 1-put sync txn", "-", None),
        Line("a_over_rows", "(a) sequential durable send over its rows, p50", ours * 1e6,
             floor * 1e6, "µs", "bare LMDB writing the same rows", "-", None),
    ]
    return lines


# (b) and (c) alternate their runs with their baselines', so that the disk's swings on a
# shared machine (its fsync latency moves several-fold within a minute) reach both alike;
# each side's rate is the median of its rounds.
ROUNDS = 5


def concurrent(root: Path, scale: Scale) -> list[Line]:
    """(b): 32 senders through the runtime's writer, durable sends per second, against the
    raw single-put sync txn's sequential ceiling and persist-queue put from 32 threads.
    Beside them the rate the process's CPU allows (one interpreter runs every sender and the
    writer): one over the CPU each send took in the same runs, as if no fsync waited."""
    crowd = Crowd(open_store(root / "b-send", sync=True), SENDERS)
    run_async(crowd.setup())
    raw = RawLmdb(root / "b-raw", sync=True)
    each = max(scale.per_sender // ROUNDS, 1)
    rates, pqs, puts, batches, cpus = [], [], [], [], []
    for _ in range(ROUNDS):
        start = time.process_time()
        rates.append(run_async(crowd.sends_per_second(each)))
        cpus.append((time.process_time() - start) / (SENDERS * each))
        batches.append(crowd.batch)
        pqs.append(pq_threads(root / "b-pq", SENDERS, each))
        puts += latencies(raw.put, 20)
    crowd.close()
    raw.close()
    rate, pq, ceiling = median(rates), median(pqs), 1 / quantile(puts, 0.5)
    what = f"(b) 32 concurrent senders, sends/s ({median(batches):.0f}/commit)"
    return [
        Line("b_vs_raw", what, rate, ceiling, "/s",
             "sequential raw 1-put sync txn ceiling (1/p50)", ">= 10x", rate / ceiling >= 10),
        Line("b_vs_pq", what, rate, pq, "/s",
             "persist-queue put, 32 threads", ">= 8x", rate / pq >= 8),
        Line("b_cpu", "(b) the CPU's ceiling: 1 / CPU per send, sends/s", 1 / median(cpus),
             ceiling, "/s", "sequential raw 1-put sync txn ceiling (1/p50)", "-", None),
    ]


def lifecycle(root: Path, scale: Scale) -> list[Line]:
    """(c): send, admit, claim at a boundary, consume at commit, with 32 senders and the
    recipient consuming beside them; persist-queue the same with put, get and ack."""
    crowd = Crowd(open_store(root / "c-send", sync=True), SENDERS)
    run_async(crowd.setup())
    each = max(scale.per_sender // ROUNDS, 1)
    rates, pqs = [], []
    for _ in range(ROUNDS):
        rates.append(run_async(crowd.sends_per_second(each, consume=True)))
        pqs.append(pq_lifecycle(root / "c-pq", SENDERS, each))
    crowd.close()
    rate, pq = median(rates), median(pqs)
    return [Line("c", "(c) full lifecycle, 32 senders + consumer, msgs/s", rate, pq, "/s",
                 "persist-queue put+get+ack, same threads", ">= 5x", rate / pq >= 5)]


def _send_costs(pair: Pair, beside: Pair, count: int) -> tuple[float, float]:
    """Per-send time on ``pair`` and on ``beside``, the best of rounds of 50 (sync off),
    alternating between the two so that a busy neighbour on a shared machine hits both
    alike, the recipients reading between rounds."""
    rounds: dict[Pair, list[float]] = {pair: [], beside: []}
    for _ in range(max(count // 50, 1)):
        for each, times in rounds.items():
            start = time.perf_counter()
            for _ in range(50):
                each.send()
            times.append((time.perf_counter() - start) / 50)
            each.deliver()
    return min(rounds[pair]), min(rounds[beside])


def history(root: Path, scale: Scale) -> tuple[list[Line], Path]:
    """(d): the cost of a send with growing history, against a send on a store with the
    smallest history, measured beside it. Sync is off so the store's own growth shows
    instead of drowning in fsync time; the history is written in bulk (``grow_history``).
    Returns the big store's path for (f)."""
    path = root / "d-history"
    small, *sizes = scale.histories
    few = Pair(open_store(root / "d-few", sync=False))
    grow_history(few, small)
    pair = Pair(open_store(path, sync=False))
    grown, lines = 0, []
    for size in sizes:
        grow_history(pair, size - grown)
        grown = size
        cost, base = _send_costs(pair, few, scale.probe)
        last = size == sizes[-1]
        lines.append(Line(f"d_{size}", f"(d) send with {size:,} in history", cost * 1e6,
                          base * 1e6, "µs", f"send with {small:,} in history, beside",
                          "<= 1.2x" if last else "-", cost / base <= 1.2 if last else None))
    pair.store.close()
    few.store.close()
    return lines, path


def _pending_store(path: Path, history_size: int, pending: int) -> None:
    """A store as a crash leaves it: runs running, ``pending`` accepted mail, and history."""
    pair = Pair(open_store(path, sync=False))
    grow_history(pair, history_size)
    pair.send_many(pending)
    # Written with sync off for speed, so flush it to disk now: otherwise the measured
    # open's first durable commit would pay for writing out the whole build.
    assert isinstance(pair.store, LmdbStore)
    pair.store._env.sync(True)
    pair.store.close()


def _recover_time(path: Path) -> float:
    start = time.perf_counter()
    store = open_store(path, sync=True)
    Engine(store, CountingIds(start=10**9), UNLIMITED).recover()
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed


def reconcile(root: Path, scale: Scale) -> list[Line]:
    """(e): open and recover with 100k history and 1k pending, against 1k history."""
    big, small = scale.histories[1], scale.histories[0]
    _pending_store(root / "e-big", big, 1000)
    _pending_store(root / "e-small", small, 1000)
    slow, fast = _recover_time(root / "e-big"), _recover_time(root / "e-small")
    return [Line("e", f"(e) open + recover, {big:,} history, 1k pending", slow, fast, "s",
                 f"same with {small:,} history", "< 0.5 s, ~1.0x", slow < 0.5)]


def _rss(*args: str) -> float:
    out = subprocess.run([sys.executable, "-m", "bench.rss", *args], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def memory(root: Path, scale: Scale, big_history: Path) -> list[Line]:
    """(f): peak RSS of a subprocess, against the same work with little in the store."""
    pending = _rss("pending", str(root / "f-pending"), str(scale.pending))
    few = _rss("pending", str(root / "f-few"), "1000")
    small = root / "f-small"
    _pending_store(small, scale.histories[0], 0)
    after_big = _rss("after", str(big_history), str(scale.probe))
    after_small = _rss("after", str(small), str(scale.probe))
    big = scale.histories[-1]
    return [
        Line("f_pending", f"(f) peak RSS, {scale.pending:,} pending", pending / 1024,
             few / 1024, "MiB", "1,000 pending", "~1.0x", None),
        Line("f_history", f"(f) peak RSS, sends after {big:,} sent", after_big / 1024,
             after_small / 1024, "MiB", f"after {scale.histories[0]:,} sent",
             "~1.0x (independent of history)", after_big / after_small <= 1.2),
    ]


def cpu(root: Path, scale: Scale) -> list[Line]:
    """(g): process CPU per send with sync off, against a raw put txn without sync; beside
    it, bare LMDB writing the very rows the sends wrote (see ``RowsFloor``), no sync."""
    rounds = scale.cpu // 50
    pair = Pair(open_store(root / "g-send", sync=False))
    raw = RawLmdb(root / "g-raw", sync=False)
    rows = RowsFloor(root / "g-rows", sync=False, rounds=rounds, per_round=50)
    spent, floors = [], []
    for _ in range(rounds):
        spent.append(cpu_per_op(pair.send, 50))
        pair.deliver()
        floors.append(cpu_per_op(rows.send, 50))
        rows.deliver()
    ours, floor = median(spent), median(floors)
    put = cpu_per_op(raw.put, scale.cpu)
    for each in (pair.store, raw, rows):
        each.close()
    return [
        Line("g", "(g) CPU per send, sync off", ours * 1e6, put * 1e6, "µs",
             "raw LMDB put txn, no sync", "<= 80 µs", ours * 1e6 <= 80),
        Line("g_rows", "(g) bare LMDB writing a send's rows, CPU", floor * 1e6, put * 1e6,
             "µs", "raw LMDB put txn, no sync", "-", None),
        Line("g_over_rows", "(g) CPU per send over its rows", ours * 1e6, floor * 1e6, "µs",
             "bare LMDB writing the same rows", "-", None),
    ]


LINES: tuple[Callable[..., object], ...] = (sequential, concurrent, lifecycle, history,
                                             reconcile, memory, cpu)
