"""A tree taken over is recovered, even when its first recovery fails.

The daemon claims a tree whose lease ran out, then recovers it (its dead run interrupted,
its claimed mail released). Once claimed, the tree's live lease keeps every other daemon
out, so if that recovery fails (the store refused it, or went away) and nobody tries again,
the tree's mail stays claimed by a dead run for good: the two-daemon failover test saw it
under load, when a recovery joined a group commit whose snapshot predated the claim. The
heartbeat therefore recovers a claimed, unrecovered tree again at each beat until done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any, cast

from treemail.adapters.daemon.ownership import Ownership
from treemail.adapters.runtime.runtime import Runtime
from treemail.adapters.store.leases import Lease, Member
from treemail.core.errors import StorageError

TREE = "00000001-0000-4000-8000-000000000000"


class OneTreeLeases:
    """Shared leases (not ``SoleLeases``) where TREE's lease has run out until claimed."""

    holder = "us"

    def __init__(self) -> None:
        self.tokens: dict[str, int] = {}

    def join(self, address: str, duration: float) -> None: ...

    def claim(self, tree: str) -> Lease:
        self.tokens[tree] = 2
        return Lease(tree, self.holder, "/run/us.sock", 2, True)

    def renew(self) -> list[str]:
        return []

    def release(self, tree: str) -> None: ...

    def held(self) -> dict[str, int]:
        return dict(self.tokens)

    def lease(self, tree: str) -> Lease | None:
        return None

    def expired(self) -> list[str]:
        return [] if TREE in self.tokens else [TREE]

    def members(self) -> list[Member]:
        return []

    def leave(self) -> None: ...

    def listen(self, woken: Callable[[str], None]) -> None: ...


class FailingOnce:
    """A runtime whose first recovery fails as a fenced or lost store makes it fail."""

    def __init__(self) -> None:
        self.attempts = 0
        self.recovered: list[set[str]] = []

    async def adopt(self, trees: Collection[str]) -> int:
        self.attempts += 1
        if self.attempts == 1:
            raise StorageError("the store refused the recovery")
        self.recovered.append(set(trees))
        return 1

    async def drop(self, trees: Collection[str]) -> None: ...


def test_a_claimed_tree_whose_recovery_failed_is_recovered_at_the_next_beat() -> None:
    leases, runtime = OneTreeLeases(), FailingOnce()
    ownership = Ownership(cast(Any, leases), cast(Runtime, runtime), "/run/us.sock", 3.0)

    async def beats() -> str:
        try:
            await ownership.beat()  # claims TREE; its recovery fails
        except StorageError as exc:
            failed = str(exc)
        else:
            failed = ""
        await ownership.beat()  # TREE is ours, not expired: recovered again all the same
        await ownership.beat()  # and only once
        return failed

    failed = asyncio.run(beats())
    assert "refused the recovery" in failed
    assert leases.held() == {TREE: 2}
    assert runtime.recovered == [{TREE}] and runtime.attempts == 2
    assert ownership.taken_over == 1
