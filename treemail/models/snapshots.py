"""A state of the model checker's search, and how it is copied and stepped.

Each explored state keeps its own (model, engine store) pair; a transition copies both and
applies the action to each. Copying beats replaying the trace: the store forks table by table
sharing its frozen records (``MemoryStore.fork``), the model's world copies field by field
(``CopyableWorld``), and the model skips the snapshot it would take before every operation
part when the search has one already (``Lockstep``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from treemail.core.config import MessagingConfig
from treemail.core.errors import ApprovalRequired, TreemailError
from treemail.core.ids import CountingIds
from treemail.core.keys import Table
from treemail.core.memory_store import MemoryStore
from treemail.models.actions import Action, outcome, perform
from treemail.models.invariants import Ledger
from treemail.models.reference import Reference
from treemail.models.world import ApprovalRecord, World

__all__ = ["CopyableWorld", "Lockstep", "Node", "clone", "fork_ids", "model_step",
           "untouched"]

T = TypeVar("T")


@attrs.define
class Node:
    """A state: the model and the engine's store (with its id source) side by side."""

    model: Reference
    store: MemoryStore
    ids: CountingIds
    restarts: int
    depth: int
    feed: int  # events in the engine's global feed: a transition's own events follow it
    config: MessagingConfig  # the engine's: a restart may have turned messaging off
    ledger: Ledger  # the feed as ``settled`` reads it, up to ``feed``
    key: bytes = b""


class CopyableWorld(World):
    """The model's ``World`` with a copy that knows its shape: each record is copied by its
    attribute dict, and the immutable values inside (strings, enums, frozen agent specs and
    send results) are shared instead of rebuilt. The model snapshots its world on every
    operation and the search copies it on every transition. The only containers a record
    holds (an approval's arguments and outcome) are copied too."""

    def __deepcopy__(self, memo: dict[int, Any]) -> CopyableWorld:
        del memo  # nothing in the world is shared with anything outside it
        return self.fork()

    def fork(self) -> CopyableWorld:
        twin = object.__new__(CopyableWorld)
        twin.sessions = {k: _copy_record(v) for k, v in self.sessions.items()}
        twin.runs = {k: _copy_record(v) for k, v in self.runs.items()}
        twin.messages = {k: _copy_record(v) for k, v in self.messages.items()}
        twin.results = dict(self.results)  # of frozen send results
        twin.calls = dict(self.calls)  # of tuples of strings and enums
        twin.produced = dict(self.produced)  # of tuples of strings and enums
        twin.grants = set(self.grants)
        twin.approvals = {k: _copy_approval(v) for k, v in self.approvals.items()}
        twin.reported = set(self.reported)
        return twin


# ``__deepcopy__`` above names every field of World: one added there must be copied there.
assert {f.name for f in dataclasses.fields(World)} == {
    "sessions", "runs", "messages", "results", "calls", "produced", "grants", "approvals",
    "reported"}


class Lockstep(Reference):
    """The reference model as the search drives it: each step already runs on a copy of the
    parent's world, so the model's own snapshot before every operation part (``_atomic``,
    taken so that a refusal changes nothing) is mostly redundant: a step refused in its one
    part leaves the parent's world, which the search still has. ``_model_step`` decides;
    with ``guarded`` set the snapshots are taken as in the model itself."""

    guarded = False
    entered = 0  # parts (_atomic blocks) the current operation entered
    torn = False  # one of them was refused: this world may hold half of it

    def _atomic(self, work: Callable[[], T]) -> T:
        if self.guarded:
            return super()._atomic(work)
        self.entered += 1
        try:
            return work()
        except TreemailError:
            self.torn = True
            raise


def _copy_record(record: T) -> T:
    """A session, run or message record: its fields are strings, numbers, enums and frozen
    specs, so a copy of its attribute dict is a deep copy."""
    twin = object.__new__(type(record))
    twin.__dict__ = record.__dict__.copy()
    return twin


def _copy_approval(record: ApprovalRecord) -> ApprovalRecord:
    twin = _copy_record(record)
    twin.arguments = copy.deepcopy(record.arguments)  # arguments may nest (a tool's JSON)
    twin.outcome = None if record.outcome is None else dict(record.outcome)
    return twin


def fork_ids(ids: CountingIds) -> CountingIds:
    """A copy of an id counter (a counter and a namespace), without ``copy.copy``'s detour
    through ``__reduce_ex__``: the search copies one per transition."""
    twin = object.__new__(CountingIds)
    twin.__dict__ = ids.__dict__.copy()
    return twin


def clone(node: Node, with_model: bool = True
           ) -> tuple[Reference | None, MemoryStore, CountingIds]:
    store = node.store.fork()  # table by table, sharing the frozen records: ~35x a deepcopy
    return _copy_model(node) if with_model else None, store, fork_ids(node.ids)


def _copy_model(node: Node) -> Reference:
    """The model's attributes, its id counter and its world copied; its config and agent
    catalogue (frozen, or not part of the durable world) shared."""
    model = node.model
    twin = object.__new__(type(model))
    twin.__dict__ = model.__dict__.copy()
    twin.ids = fork_ids(model.ids)
    world = model.world
    twin.world = world.fork() if isinstance(world, CopyableWorld) else copy.deepcopy(world)
    return twin


def model_step(node: Node, model: Lockstep, action: Action
                ) -> tuple[Reference, tuple[Any, ...]]:
    """The model's answer to ``action`` and its world after it, from ``model``, a copy of
    ``node``'s. A refusal inside the operation's only part leaves ``node``'s world (unless
    the search itself went on after it: an ask answered by holding the call). Any other torn
    operation runs again on a fresh copy, with the model's snapshots on."""
    model.entered, model.torn = 0, False
    want = outcome(lambda: perform(action, model))
    if not model.torn or model.guarded:
        return model, want
    if model.entered == 1 and want[1] != ApprovalRequired.code:
        return node.model, want
    guarded = _copy_model(node)
    assert isinstance(guarded, Lockstep)
    guarded.guarded = True
    want = outcome(lambda: perform(action, guarded))
    guarded.guarded = False
    return guarded, want


def untouched(node: Node, store: MemoryStore, ids: CountingIds) -> bool:
    """Whether ``store`` and ``ids``, forked from ``node``'s, are still exactly as they were:
    every table row for row (the rows are shared records, so this is mostly identity checks)
    and the next id."""
    if ids.peek() != node.ids.peek():
        return False
    return all(store.rows(table) == node.store.rows(table) for table in Table)
