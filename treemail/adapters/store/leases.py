"""Tree leases: which daemon owns each tree, and the fencing token its writes carry.

A store served by several daemons (PostgreSQL) gives each tree to exactly one of them at a
time through a lease: a row naming the holder, where clients reach it, a token and an expiry.
The holder renews its leases on a heartbeat; a lease not renewed within its duration is
expired, and any live daemon may then claim the tree, which raises the tree's token by one.
Every write transaction of a holder checks, inside the transaction, that each tree it writes
is leased to it, under the token it holds, and had not run out when the transaction began: a
daemon that lost a tree (it stalled, or was cut off, and another took over), or dropped it,
is refused with ``store:fenced`` and stores nothing into it, so two daemons never both write
one tree. Only the trees written count: a lapsed lease refuses no write into another tree.
A tree nobody ever leased (one the transaction creates) is leased to the writer by that very
transaction, so no daemon ever sees a tree without its owner.

A store one process holds whole (LMDB, whose flock keeps every other writer out; memory)
has ``SoleLeases``: the same operations, in the process, where every claim succeeds. So the
daemon speaks one ownership language on every store, and ``tests/unit/test_leases.py`` holds
the semantics common to all of them.

Placement of a new tree (``place``): the live member holding the fewest live trees, ties by
holder id, so that a fleet started together fills evenly and the choice is the same whoever
computes it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from treemail.core.store import Store

__all__ = ["DEFAULT_LEASE_SECONDS", "Lease", "Leases", "Member", "SoleLeases", "leases_of",
           "place"]

# Long enough that a daemon busy with a burst (or a server restart of a few seconds) keeps
# its trees; short enough that a dead daemon's trees are served again within a minute.
DEFAULT_LEASE_SECONDS = 15.0


@attrs.frozen
class Lease:
    """A tree's lease as stored: its holder (a daemon's id), where clients reach the holder,
    the fencing token, and whether it is live (not expired) now."""

    tree: str
    holder: str
    address: str
    token: int
    live: bool


@attrs.frozen
class Member:
    """A live daemon sharing the store, where clients reach it, and how many live trees it
    holds."""

    holder: str
    address: str
    trees: int


class Leases(Protocol):
    """The lease operations of a store, as one holder (this process) sees them."""

    @property
    def holder(self) -> str:
        """This process's holder id, unique to it."""
        ...

    def join(self, address: str, duration: float) -> None:
        """Become a live member reachable at ``address``; leases last ``duration`` seconds
        past each claim or renewal."""
        ...

    def claim(self, tree: str) -> Lease:
        """Take ``tree`` if it has no live lease (raising its token), or extend ours; returns
        the lease now on it: ours, or the live holder's when another has it."""
        ...

    def renew(self) -> list[str]:
        """Extend every lease we hold (and our membership); returns the trees we lost (taken
        over, or expired before this renewal), which are no longer held."""
        ...

    def release(self, tree: str) -> None:
        """Give ``tree`` up: its lease expires now, for another to claim."""
        ...

    def held(self) -> dict[str, int]:
        """The trees we hold, with their tokens."""
        ...

    def lease(self, tree: str) -> Lease | None:
        """The stored lease of ``tree``, whoever holds it."""
        ...

    def expired(self) -> list[str]:
        """Trees whose lease has run out, ours included: there for a live member to claim."""
        ...

    def members(self) -> list[Member]:
        """The live members, fewest live trees first, ties by holder id."""
        ...

    def leave(self) -> None:
        """Release every tree we hold and stop being a member (a clean shutdown)."""
        ...

    def listen(self, woken: Callable[[str], None]) -> None:
        """Hear the other holders at once: ``woken`` is called (on another thread) with
        ``w:HOLDER`` when one grew the feed, ``r:HOLDER`` when one gave trees up, and ``""``
        when notifications may have been missed. A store without others hears nothing."""
        ...


def place(members: Sequence[Member]) -> Member | None:
    """Where a new tree goes: the live member with the fewest live trees, ties by holder id."""
    return min(members, key=lambda m: (m.trees, m.holder), default=None)


class SoleLeases:
    """Leases of a store one process holds whole: every claim of a tree succeeds, tokens
    still rise on each claim after a release, and there is one member, this process."""

    def __init__(self) -> None:
        self._holder = uuid.uuid4().hex
        self._address = ""
        self._lock = threading.Lock()
        self._tokens: dict[str, int] = {}  # every tree ever claimed: its last token
        self._held: set[str] = set()
        self._member = False

    @property
    def holder(self) -> str:
        return self._holder

    def join(self, address: str, duration: float) -> None:
        with self._lock:
            self._address, self._member = address, True

    def claim(self, tree: str) -> Lease:
        with self._lock:
            if tree not in self._held:
                self._tokens[tree] = self._tokens.get(tree, 0) + 1
                self._held.add(tree)
            return Lease(tree, self._holder, self._address, self._tokens[tree], True)

    def renew(self) -> list[str]:
        return []  # nobody else can take a tree of a store this process holds whole

    def release(self, tree: str) -> None:
        with self._lock:
            self._held.discard(tree)

    def held(self) -> dict[str, int]:
        with self._lock:
            return {tree: self._tokens[tree] for tree in self._held}

    def lease(self, tree: str) -> Lease | None:
        with self._lock:
            if tree not in self._tokens:
                return None
            return Lease(tree, self._holder, self._address, self._tokens[tree],
                         tree in self._held)

    def expired(self) -> list[str]:
        with self._lock:
            return sorted(set(self._tokens) - self._held)

    def members(self) -> list[Member]:
        with self._lock:
            if not self._member:
                return []
            return [Member(self._holder, self._address, len(self._held))]

    def leave(self) -> None:
        with self._lock:
            self._held.clear()
            self._member = False

    def listen(self, woken: Callable[[str], None]) -> None:
        return  # no other holder to hear


def leases_of(store: Store) -> Leases:
    """The store's leases: its own when several processes may share it (``tree_leases``),
    else ``SoleLeases`` for this process. Ask once per store: each call of the latter makes
    a new, empty one."""
    inner = getattr(store, "inner", store)  # a GroupStore's store
    shared: Leases | None = getattr(inner, "tree_leases", None)
    return shared if shared is not None else SoleLeases()
