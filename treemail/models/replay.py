"""``treemail check --store lmdb``: every transition run again on another store.

The search keeps its states on ``MemoryStore`` (a fork per transition is what makes it fast).
With a store factory, each transition is also run on a fresh store of the factory's kind:
the path to the state is replayed there from the empty world (the same actions, so the same
ids from a fresh ``CountingIds``), then the action, and the answer and the whole observable
state are checked against the model's, as the memory engine's are. A replay costs one
operation per step of the path, so this is for small bounds; it is how the checker sees the
engine on the store it runs on in production (the LMDB store's own encoding, indexes and
counters) without this package depending on any store adapter: the caller hands the factory
in, and ``models`` stays above ``core`` alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import attrs

from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.ids import CountingIds
from treemail.core.store import Store
from treemail.models.actions import Action, outcome, perform
from treemail.models.invariants import Failure, agreement, pending_mail
from treemail.models.reference import Reference

__all__ = ["Replay", "StoreFactory"]

# A fresh, empty store, closed (and its files removed) when the block ends.
StoreFactory = Callable[[], AbstractContextManager[Store]]


class Replay:
    """The paths to the explored states, and the check of a transition on another store."""

    def __init__(self, factory: StoreFactory, config: MessagingConfig) -> None:
        self.factory, self.config = factory, config
        self.paths: dict[bytes, tuple[Action, ...]] = {}
        self.steps = 0  # operations run on the other store, replays included

    def reached(self, key: bytes, parent: bytes | None, action: Action | None) -> None:
        """A state found: its path is its parent's and the action."""
        if key not in self.paths:
            self.paths[key] = () if parent is None or action is None else (
                *self.paths[parent], action)

    def check(self, key: bytes, action: Action, answer: tuple[Any, ...], model: Reference
              ) -> Failure | None:
        """Replay the path to state ``key`` on a fresh store, run ``action``, and compare the
        answer with ``answer`` (the model's, which the memory engine gave too) and the store
        with ``model``, the model after the action."""
        with self.factory() as store:
            ids, config = CountingIds(), self.config
            got: tuple[Any, ...] = ()
            for step in (*self.paths[key], action):
                engine = Engine(store, ids, config)  # a new one per step, as the search does
                got = outcome(functools.partial(perform, step, engine))
                self.steps += 1
                if step.kind == "restart" and step.args == (False,):
                    config = attrs.evolve(config, enabled=False)  # held from then on
            if got != answer:
                return ("AGREE", f"{action.kind} answered differently on the other store\n"
                                 f"    engine: {got!r}\n    model:  {answer!r}")
            with store.read() as tx:
                return agreement(tx, ids, model, pending_mail(tx))
