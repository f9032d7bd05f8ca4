"""The model checker's search over a pool of processes: the same states, a core each.

The search is breadth-first, level by level. The states are partitioned by their key: the
worker a key's hash names owns it, keeps it in its seen-set, and expands it when its level
comes. A level is visited in chunks (``CHUNK`` states a worker at most, cut at the same
places of the order on every worker), each three exchanges between the coordinator (this
process) and the workers:

1. ``level``: each worker visits its frontier's states in the chunk (the same
   ``Checker.visit`` as the one-process search: expand, check, drain) and keeps the
   successors it generated, then offers each key another worker owns to that owner: the key
   and the successor's place in the order.
2. ``decide``: each owner takes the keys it has not seen, its own successors' and those
   offered, and picks each one's winner: the first in the order. No later chunk can beat it:
   its successors all come later.
3. ``keep``: each worker keeps the winners it generated, whoever owns them: the owner's
   seen-set is what makes each state visited once, not where the state is visited. A winner
   at the depth cap (four states in five) is drained there and then, and forgotten: no
   worker holds more of them than a chunk makes (holding the whole bottom level until its
   turn took 2 GB a worker at depth 8). The others join the next frontier.

When the level is done, ``give``: the order is cut into windows of ``CHUNK`` states a
worker, and in each a worker holding more than its share sends the surplus, pickled, to those
holding less (``balance``); they join its frontier as the next level begins, and the windows
are the next level's chunks. (Shipping each winner to its owner instead pickled half of every
frontier: a tenth of the search.)

The order is the one the one-process search discovers states in: a state's place is its
parent's place followed by the index of the action in the parent's alphabet, compared as
tuples. So each state is reached through the same parent as in the one-process search, with
the same ledger and trace, and the counts, the coverage and the first shortest
counterexample are the same for any number of workers (``test_checker_parallel``).

``check`` is the checker's entry point: the one-process search (with a store replaying it,
when asked) or this one over ``workers`` processes.

Workers are forked, so a planted bug (``plants``) and any other patch made before the search
is in each of them; each records its own coverage, which the coordinator merges.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import pickle
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO, cast

import attrs

from treemail.core.config import MessagingConfig
from treemail.models import balance, heap
from treemail.models.actions import Action
from treemail.models.balance import Place
from treemail.models.checker import (
    DEFAULT_CONFIG,
    Checker,
    Counterexample,
    Result,
    eta,
    expands_nothing,
)
from treemail.models.coverage import Coverage, recording
from treemail.models.explore import Bounds
from treemail.models.replay import Replay, StoreFactory
from treemail.models.snapshots import Node

__all__ = ["check", "explore", "owner"]

Trail = tuple[str, Any] | None  # the labels to a state, last first, sharing the parent's
Entry = tuple[Place, Trail, Node]
Failed = tuple[tuple[Any, ...], Counterexample]  # a counterexample, and its place in the order


def owner(key: bytes, workers: int) -> int:
    """The worker that owns the state keyed ``key`` (keys are uniform digests)."""
    return int.from_bytes(key[:8], "little") % workers


def _labels(trail: Trail) -> tuple[str, ...]:
    labels: list[str] = []
    while trail is not None:
        label, trail = trail
        labels.append(label)
    return tuple(reversed(labels))


@attrs.frozen
class Level:
    """What a worker's visit of a chunk of its frontier found: the counterexamples, each with
    its place in the one-process search's order, and the keys it offers to each other
    worker."""

    failures: list[tuple[tuple[Any, ...], Counterexample]]
    offers: dict[int, list[tuple[bytes, Place]]]


# A level's frontier is visited in chunks of about this many states per worker, each chunk's
# successors decided before the next is visited: a successor at the depth cap is drained as
# soon as its winner is known, so no worker holds more than a chunk's worth of them.
CHUNK = 128


class Partition(Checker):
    """One worker's share of the search: the keys it owns, its frontier, and the successors
    it generated in the chunk being visited."""

    def __init__(self, index: int, workers: int, config: MessagingConfig, bounds: Bounds,
                 history: bool) -> None:
        super().__init__(config, bounds, None, history)
        self.index, self.workers = index, workers
        self.seen: set[bytes] = set()
        self.frontier: list[Entry] = []
        self.next: list[Entry] = []  # the next level's frontier, as the chunks decide it
        self.visited = 0  # the states of the frontier visited so far
        self.generated: dict[bytes, Entry] = {}
        self.mine: list[Entry] = []  # the winners generated here and owned here (``decide``)
        self._trail: Trail = None  # the trail of the state being visited
        self.cpu = 0.0

    def path(self, node: Node) -> tuple[str, ...]:
        return _labels(self._trail)

    def start(self) -> None:
        """The empty world, by the worker that owns it."""
        root = self.root()
        if owner(root.key, self.workers) == self.index:
            self.seen.add(root.key)
            self.next.append(((), None, root))

    def begin(self, shipped: Sequence[bytes]) -> int:
        """A level begins: the states ``shipped`` here by ``give`` join the frontier, in the
        one-process order. Its size."""
        cpu = time.process_time()
        self.frontier, self.next = self.next, []
        self.frontier += [pickle.loads(entry) for entry in shipped]
        self.frontier.sort(key=lambda entry: entry[0])
        self.visited = 0
        heap.settle()  # a worker is its own process: what it freezes is its own
        self.cpu += time.process_time() - cpu
        return len(self.frontier)

    def level(self, until: Place | None, shortest: int | None) -> Level:
        """Visit the frontier's states before place ``until`` (None: all that are left), in
        the one-process order, and offer each successor's key another worker owns to that
        owner: the key and the successor's place in the order."""
        cpu = time.process_time()
        failures: list[tuple[tuple[Any, ...], Counterexample]] = []
        frontier, at = self.frontier, self.visited
        with recording(self.coverage):
            while at < len(frontier) and (until is None or frontier[at][0] < until):
                place, trail, node = frontier[at]
                frontier[at] = _VISITED  # visited: its children hold what they need of it
                at += 1
                self._trail = trail
                if shortest is not None and node.depth >= shortest:
                    continue  # nothing shorter is left to find (see ``Checker._search``)

                def found(child: Node, action: Action, index: int,
                          place: Place = place, trail: Trail = trail) -> None:
                    if child.key in self.seen:
                        return  # owned here and explored already
                    entry = ((*place, index), (action.label, trail), child)
                    known = self.generated.get(child.key)
                    if known is None or entry[0] < known[0]:
                        self.generated[child.key] = entry

                for failed in self._failures(node, place, self.visit(node, found, shortest)):
                    failures.append(failed)
                    if shortest is None or failed[0][0] < shortest:
                        shortest = failed[0][0]
        self.visited = at
        offers: dict[int, list[tuple[bytes, Place]]] = {}
        for key, (place, _, _) in self.generated.items():
            to = owner(key, self.workers)
            if to != self.index:
                offers.setdefault(to, []).append((key, place))
        self.cpu += time.process_time() - cpu
        return Level(failures, offers)

    @staticmethod
    def _failures(node: Node, place: Place, found: list[Counterexample]
                  ) -> list[tuple[tuple[Any, ...], Counterexample]]:
        # The one-process search meets these in this order, and keeps the first of the
        # shortest: a state's own failure (kind 0) before its drain's.
        return [((len(failure.trace), node.depth, place, kind), failure)
                for kind, failure in enumerate(found)]

    def decide(self, offered: Sequence[tuple[bytes, Place, int]]) -> dict[int, list[bytes]]:
        """The winner of each key this worker owns and has not seen: its own successor's or
        one offered by another worker, whichever comes first in the order (the chunks are
        visited in that order too, so no later chunk can beat it). Winners generated here
        are kept; the others are told to their generators, by worker (``keep``)."""
        cpu = time.process_time()
        best: dict[bytes, tuple[Place, int]] = {}
        for key, (place, _, _) in self.generated.items():
            if owner(key, self.workers) == self.index and key not in self.seen:
                best[key] = (place, self.index)
        for key, place, by in offered:
            if key not in self.seen and (key not in best or place < best[key][0]):
                best[key] = (place, by)
        wanted: dict[int, list[bytes]] = {}
        for key, (_, by) in best.items():
            self.seen.add(key)
            if by == self.index:
                self.mine.append(self.generated[key])
            else:
                wanted.setdefault(by, []).append(key)
        self.cpu += time.process_time() - cpu
        return wanted

    def keep(self, won: Sequence[bytes], shortest: int | None
             ) -> tuple[list[tuple[tuple[Any, ...], Counterexample]], int]:
        """The winners generated here (``won``: those other workers own) join the next
        frontier, and the other successors are forgotten; a winner at the depth cap is
        drained now instead, unless a counterexample above the cap no longer than its depth
        (``shortest``) is known (see ``Checker._found``). Their failures, and the states
        drained."""
        cpu = time.process_time()
        kept, self.mine = self.mine + [self.generated[key] for key in won], []
        self.generated = {}
        kept.sort(key=lambda entry: entry[0])
        failures: list[tuple[tuple[Any, ...], Counterexample]] = []
        drained = 0
        with recording(self.coverage):
            for place, trail, node in kept:
                if node.depth < self.bounds.depth:
                    self.next.append((place, trail, node))
                elif shortest is None or node.depth < shortest:
                    self._trail = trail
                    failures += self._failures(node, place,
                                               self.visit(node, expands_nothing, None))
                    drained += 1
        self.cpu += time.process_time() - cpu
        return failures, drained

    def give(self, moves: balance.Moves) -> list[list[bytes]]:
        """The states of the next frontier that ``moves`` names (by index), pickled for the
        worker each goes to, and no longer visited here."""
        cpu = time.process_time()
        shipped: list[list[bytes]] = [[] for _ in range(self.workers)]
        given = {at: to for to, ats in moves.items() for at in ats}
        if given:
            for at, to in given.items():
                shipped[to].append(pickle.dumps(self.next[at], pickle.HIGHEST_PROTOCOL))
            self.next = [entry for at, entry in enumerate(self.next) if at not in given]
        self.cpu += time.process_time() - cpu
        return shipped

    def places(self) -> list[Place]:
        """The next frontier's places, in the order (``keep`` adds them chunk by chunk), for
        ``give``."""
        return [entry[0] for entry in self.next]

    def totals(self) -> tuple[int, Result]:
        """The states this worker owns, and its counts (in a ``Result`` without a verdict)."""
        return len(self.seen), self.result(len(self.seen), None, 0.0, self.cpu)


# A visited frontier entry's stand-in: the frontier is read once, and holds no state it read.
_VISITED = cast(Entry, ((), None, None))


class _Remote:
    """A worker process serving one ``Partition``: each call is sent as a method name and
    arguments, and answered with the method's return value (or the exception it raised)."""

    def __init__(self, context: Any, index: int, workers: int, config: MessagingConfig,
                 bounds: Bounds, history: bool) -> None:
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, daemon=True,
                                       args=(theirs, index, workers, config, bounds, history))
        self.process.start()
        theirs.close()

    def send(self, method: str, *args: Any) -> None:
        self.conn.send((method, args))

    def receive(self) -> Any:
        ok, value = self.conn.recv()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self.conn.send(None)
        self.process.join()


def _serve(conn: multiprocessing.connection.Connection, index: int, workers: int,
           config: MessagingConfig, bounds: Bounds, history: bool) -> None:
    partition = Partition(index, workers, config, bounds, history)
    while (call := conn.recv()) is not None:
        method, args = call
        try:
            conn.send((True, getattr(partition, method)(*args)))
        except Exception as exc:  # the coordinator raises it, where the search was asked for
            conn.send((False, exc))


class _Local:
    """The one-worker case in this process, behind the same calls as ``_Remote``."""

    def __init__(self, partition: Partition) -> None:
        self.partition, self._answer = partition, None

    def send(self, method: str, *args: Any) -> None:
        self._answer = getattr(self.partition, method)(*args)

    def receive(self) -> Any:
        return self._answer

    def close(self) -> None:
        pass


def _all(workers: Sequence[_Remote | _Local], method: str, args: Sequence[tuple[Any, ...]]
         ) -> list[Any]:
    """``method`` called on every worker at once, with its own arguments; their answers."""
    for worker, given in zip(workers, args, strict=True):
        worker.send(method, *given)
    return [worker.receive() for worker in workers]


def explore(config: MessagingConfig, bounds: Bounds, workers: int,
            progress: TextIO | None = None, history: bool = False,
            expected: int | None = None) -> Result:
    """The search of ``Checker.run`` over ``workers`` processes (this one alone for one)."""
    started, cpu = time.monotonic(), time.process_time()
    if workers == 1:
        pool: list[_Remote | _Local] = [_Local(Partition(0, 1, config, bounds, history))]
    else:
        context = multiprocessing.get_context("fork")  # patches (plants) reach the workers
        pool = [_Remote(context, index, workers, config, bounds, history)
                for index in range(workers)]
    # With one worker its levels run here, and each freezes this process's heap
    # (``heap.settle``): the caller gets its collector back as it was.
    try:
        with heap.eased():
            return _levels(pool, started, cpu, progress, expected)
    finally:
        for worker in pool:
            worker.close()


def _levels(pool: Sequence[_Remote | _Local], started: float, cpu: float,
            progress: TextIO | None, expected: int | None = None) -> Result:
    _all(pool, "start", [()] * len(pool))
    shipped: list[list[bytes]] = [[] for _ in pool]
    # The first shortest counterexample above the depth cap, and at it: the states at the
    # cap are drained chunk by chunk, while the level above is still being visited, and a
    # counterexample of theirs prunes nothing there (it comes later in the order).
    best: Failed | None = None
    bottom: Failed | None = None
    depth = visited = 0
    ends: list[Place | None] = [None]  # the root's level: one chunk
    while True:
        begun: list[int] = _all(pool, "begin", [(mine,) for mine in shipped])
        if not any(begun):
            break
        for until in ends:
            shortest = None if best is None else len(best[1].trace)
            levels: list[Level] = _all(pool, "level", [(until, shortest)] * len(pool))
            best = _first([failure for level in levels for failure in level.failures], best)
            shortest = None if best is None else len(best[1].trace)
            kept = _exchange(pool, levels, shortest)
            bottom = _first([failure for failures, _ in kept for failure in failures], bottom)
            visited += sum(drained for _, drained in kept)
        places: list[list[Place]] = _all(pool, "places", [()] * len(pool))
        moves, cuts = balance.plan(places, CHUNK)
        shipped = _give(pool, moves)
        ends = [*cuts, None]
        depth += 1
        visited += sum(begun)  # each state is in one level's frontier: the one it is visited in
        if progress is not None:
            next_size = sum(len(mine) for mine in places)
            progress.write(f"\r  level {depth:>2} done; next frontier {next_size:>8}  "
                           f"{eta(visited, time.monotonic() - started, expected)} ")
            progress.flush()
    return _merge(_all(pool, "totals", [()] * len(pool)), _first([bottom] if bottom else [], best),
                  time.monotonic() - started, time.process_time() - cpu, progress)


def _first(found: list[Failed], best: Failed | None) -> Failed | None:
    return min([*found, *([best] if best else [])], key=lambda f: f[0], default=None)


def _exchange(pool: Sequence[_Remote | _Local], levels: list[Level], shortest: int | None
              ) -> list[tuple[list[Failed], int]]:
    """The offers to their owners, the owners' verdicts to the generators, which keep their
    winners (and drain those at the depth cap): the failures and the states drained."""
    offered: list[list[tuple[bytes, Place, int]]] = [[] for _ in pool]
    for by, level in enumerate(levels):
        for to, offers in level.offers.items():
            offered[to] += [(key, place, by) for key, place in offers]
    won: list[list[bytes]] = [[] for _ in pool]  # by generator
    for asks in _all(pool, "decide", [(mine,) for mine in offered]):
        for by, keys in asks.items():
            won[by] += keys
    kept: list[tuple[list[Failed], int]] = _all(pool, "keep", [(mine, shortest) for mine in won])
    return kept


def _give(pool: Sequence[_Remote | _Local], moves: Sequence[balance.Moves]
          ) -> list[list[bytes]]:
    """Each window's surplus (pickled) for the workers short of their share of it."""
    shipped: list[list[bytes]] = [[] for _ in pool]
    for given in _all(pool, "give", [(mine,) for mine in moves]):
        for to, pickles in enumerate(given):
            shipped[to] += pickles
    return shipped


def _merge(totals: list[tuple[int, Result]],
           best: tuple[tuple[Any, ...], Counterexample] | None, seconds: float,
           cpu: float, progress: TextIO | None) -> Result:
    """The workers' counts summed (their CPU time too), their coverage united."""
    coverage, outcomes = Coverage(), Counter[str]()
    for _, part in totals:
        coverage.merge(part.coverage)
        outcomes.update(part.outcomes)
    parts = [part for _, part in totals]
    if progress is not None:
        progress.write("\n")
    return Result(
        sum(states for states, _ in totals), sum(p.transitions for p in parts),
        sum(p.drain_steps for p in parts), sum(p.pruned for p in parts),
        max(p.depth for p in parts), sum(p.capped for p in parts), seconds, dict(outcomes),
        None if best is None else best[1], coverage, sum(p.drained for p in parts),
        cpu + (sum(p.cpu for p in parts) if len(parts) > 1 else 0.0))


def check(config: MessagingConfig = DEFAULT_CONFIG, bounds: Bounds | None = None,
          progress: TextIO | None = None, history: bool = False,
          store: StoreFactory | None = None, workers: int = 1,
          expected: int | None = None) -> Result:
    """Explore every interleaving within ``bounds``; the first shortest counterexample, if any.
    ``history``: key states on their whole past too (exact id renaming only; never finite).
    ``store``: also run every transition on a fresh store from this factory (``replay``),
    in this process. ``workers``: processes to search over (``parallel``); the result is the
    same for any number. ``expected``: the states it will reach, if known (the progress
    line's ETA)."""
    bounds = bounds if bounds is not None else Bounds()
    if store is None and workers > 1:
        return explore(config, bounds, workers, progress, history, expected)
    replay = Replay(store, config) if store is not None else None
    return Checker(config, bounds, progress, history, replay=replay, expected=expected).run()
