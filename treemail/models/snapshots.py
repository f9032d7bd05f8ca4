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

from treemail.core.errors import ApprovalRequired, TreemailError
from treemail.core.ids import CountingIds
from treemail.core.records import SendResult
from treemail.core.store import MemoryStore
from treemail.models.explore import Action, outcome, perform
from treemail.models.reference import Reference
from treemail.models.world import World

__all__ = ["CopyableWorld", "Lockstep", "Node", "clone", "model_step"]

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
    key: bytes = b""


class CopyableWorld(World):
    """The model's ``World`` with a deep copy that knows its shape: each record is copied
    field by field, and the immutable values inside (strings, enums, frozen agent specs and
    send results) are shared instead of rebuilt. The model snapshots its world on every
    operation and the search copies it on every transition: this halves the checker's time.
    Containers held by a record (an approval's arguments) are copied too."""

    def __deepcopy__(self, memo: dict[int, Any]) -> CopyableWorld:
        twin = copy.copy(self)
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, dict):
                value = {k: _copy_record(v, memo) for k, v in value.items()}
            elif isinstance(value, set | list):
                value = copy.copy(value)  # of tuples and strings
            else:
                value = copy.deepcopy(value, memo)
            setattr(twin, field.name, value)
        return twin


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


def _copy_record(record: Any, memo: dict[int, Any]) -> Any:
    if isinstance(record, SendResult):  # frozen, of strings and enums
        return record
    if not dataclasses.is_dataclass(record) or not hasattr(record, "__dict__"):
        return copy.deepcopy(record, memo)
    twin = object.__new__(type(record))
    vars(twin).update({k: copy.copy(v) if isinstance(v, dict | list | set) else v
                       for k, v in vars(record).items()})
    return twin


def clone(node: Node, with_model: bool = True
           ) -> tuple[Reference | None, MemoryStore, CountingIds]:
    store = node.store.fork()  # table by table, sharing the frozen records: ~35x a deepcopy
    return _copy_model(node) if with_model else None, store, copy.copy(node.ids)


def _copy_model(node: Node) -> Reference:
    memo: dict[int, Any] = {id(node.model.config): node.model.config}  # frozen: shared
    return copy.deepcopy(node.model, memo)


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
