"""The garbage collector's share of the search, kept small.

The search holds a level's states (each a store and a world of frozen records) while it
visits them, and piles up the next level's as it goes. CPython's collector scanned that
heap again and again: each full collection walked every stored record of every queued
state. Yet the search makes next to no cyclic garbage (its records, stores and worlds are
trees, freed by their reference counts when a state is dropped), so nothing is lost by not
looking: as each level begins, what is alive is frozen out of the collector's sight, and the
youngest generation is collected every 20,000 allocations instead of every 700, by which
time nearly all of a step's objects have died by their counts.

Measured on `treemail check --bounds depth=7` (two workers, runs alternated with the search
before this): 45.3 CPU s -> 38.2; the freeze alone gave 43.4, the collector turned off
altogether 39.0.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["eased", "settle"]

_EASED = (20_000, 10, 10)


def settle() -> None:
    """As a level begins: the states alive now outlive the level's steps, so the collector
    stops scanning them."""
    gc.freeze()
    gc.set_threshold(*_EASED)


@contextmanager
def eased() -> Iterator[None]:
    """A search in this process: the collector's thresholds as they were, and the states it
    froze in sight again, once it is over (they are garbage then)."""
    kept = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*kept)
        gc.unfreeze()
