"""The search's memory does not grow with the states at its depth cap.

Four states in five are at the cap, drained but never expanded. The search drains each as
soon as it is known to be new (the one-process search), or once its chunk of the level above
has decided its winner (the pool), instead of holding the whole bottom level until its turn.
Here that is counted, not timed: how many states at the cap are alive whenever one drains.
"""

from __future__ import annotations

import weakref
from typing import Any

import attrs
import pytest

from tests.property.test_checker import WINDOWED
from treemail.models import parallel
from treemail.models.checker import Checker, Counterexample
from treemail.models.explore import Bounds
from treemail.models.parallel import Partition, explore
from treemail.models.snapshots import Node

# 1,352 states at the cap, 244 above it.
CAPPED = attrs.evolve(Bounds(), depth=5)


class _Census:
    """The states at the cap made by the search's steps, and the most of them alive at any
    drain of one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, checker: type[Checker]) -> None:
        self.alive: dict[int, weakref.ref[Node]] = {}  # nodes are unhashable: by id
        self.most = self.drains = 0
        census = self
        step, drain = checker.step, checker.drain

        def counted_step(self: Checker, node: Node, action: Any) -> Any:
            made = step(self, node, action)
            if made[0].depth >= self.bounds.depth:
                census.born(made[0])
            return made

        def counted_drain(self: Checker, node: Node) -> Counterexample | None:
            if node.depth >= self.bounds.depth:
                census.most, census.drains = max(census.most, len(census.alive)), census.drains + 1
            return drain(self, node)

        monkeypatch.setattr(checker, "step", counted_step)
        monkeypatch.setattr(checker, "drain", counted_drain)

    def born(self, node: Node) -> None:
        at = id(node)
        self.alive[at] = weakref.ref(node, lambda _: self.alive.pop(at, None))


def test_the_one_process_search_holds_no_level_of_states_at_the_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    census = _Census(monkeypatch, Checker)
    result = Checker(WINDOWED, CAPPED).run()
    assert result.counterexample is None and result.capped == census.drains > 800
    # The one drained, and its siblings the parent's expansion still has in hand.
    assert census.most <= 3, census.most


def test_the_pool_holds_a_chunk_of_states_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker (in this process), chunks of eight states of the level above the cap: a
    chunk's successors at the cap, at most, are alive at once."""
    monkeypatch.setattr(parallel, "CHUNK", 8)
    census = _Census(monkeypatch, Partition)
    result = explore(WINDOWED, CAPPED, 1)
    assert result.counterexample is None and result.capped == census.drains > 800
    assert census.most <= 8 * 20, census.most  # 20: more than any state's successors
