"""How the pool evens out its workers' frontiers between levels: window by window of the
search's order, not only in size.

A level is visited in chunks, each cut at the same places of the order on every worker and
each ending at a barrier (``parallel``): a worker with few states in a chunk waits for the
others. A worker's next frontier is the winners it generated, and a winner is the first
in the order of the states found alike, so a worker whose states come early in the order
wins the early duplicates again, level after level. Evening out the sizes alone left the
frontiers the same size but apart in the order: at depth 7 with an external session, three
quarters of one worker's frontier came before the other's median, and at depth 9 one
worker waited for the other most of the level (5 CPU minutes against 18).

So the order is cut into windows of ``window`` states per worker, and in each window the
surplus moves, and only the surplus: every worker holds its share of every window, within
one. Frontiers spread alike over the order move almost nothing; the chunks are then the
windows (``plan``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["plan"]

Place = tuple[int, ...]  # a state's place in the one-process search's order (``parallel``)
Moves = dict[int, list[int]]  # a giver's moves: taker -> indexes into the giver's frontier


def plan(places: Sequence[Sequence[Place]], window: int) -> tuple[list[Moves], list[Place]]:
    """For each worker, which states of its next frontier (indexes into ``places[worker]``,
    each in the order) to give to which other worker; and the first place of every window
    but the first, where the level's chunks end. One pass over the merged order."""
    workers = len(places)
    given: list[Moves] = [{} for _ in places]
    cuts: list[Place] = []
    for batch in _windows(places, window * workers):
        cuts.append(batch[0][0])
        held: list[list[int]] = [[] for _ in places]
        for _, by, at in batch:
            held[by].append(at)
        size = len(batch)
        share = [size // workers + (index < size % workers) for index in range(workers)]
        wanting = [(taker, share[taker] - len(mine)) for taker, mine in enumerate(held)
                   if len(mine) < share[taker]]
        takers = iter([taker for taker, short in wanting for _ in range(short)])
        for giver, mine in enumerate(held):
            for at in _spread(mine, len(mine) - share[giver]):
                given[giver].setdefault(next(takers), []).append(at)
    return given, cuts[1:]


def _windows(places: Sequence[Sequence[Place]], size: int
             ) -> Iterator[list[tuple[Place, int, int]]]:
    """Every worker's states merged in the order, ``size`` at a time, as (place, worker,
    index in its frontier)."""
    merged = heapq.merge(*[[(place, by, at) for at, place in enumerate(mine)]
                           for by, mine in enumerate(places)])
    batch: list[tuple[Place, int, int]] = []
    for item in merged:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _spread(items: list[Any], count: int) -> list[Any]:
    """``count`` of ``items`` (none when ``count`` is 0 or less), evenly spread over them: a
    giver keeps states all along its window, as the taker gets them."""
    if count <= 0:
        return []
    return [items[(2 * k + 1) * len(items) // (2 * count)] for k in range(count)]
