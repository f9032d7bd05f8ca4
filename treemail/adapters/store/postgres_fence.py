"""The fence of a ``PostgresStore`` shared by daemons: a write only into the writer's trees.

Each daemon sharing the store owns its trees through leases with fencing tokens
(``postgres_leases``), and every write transaction checks, inside itself, that each tree it
writes is leased to its writer (``Fence.check``), else it is refused with ``store:fenced``
and stores nothing; in a group commit, only the operations that wrote such a tree fail
(``Refuse``: the batch runs again, refusing each write into those trees where it is made).
The fence is the one read another transaction's write must not slip past: it locks the
lease rows it reads (``FOR SHARE``), so a takeover that raises a token waits for this
transaction, or this one fails and runs again to find the new token.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from treemail.adapters.store.postgres_leases import PgLeases, birth_query, fence_query
from treemail.adapters.store.postgres_txn import PgTables
from treemail.core.errors import StorageError, StoreFenced

__all__ = ["Fence", "Refuse"]


class Refuse(Exception):
    """The fence refused trees a batch wrote: run it again, refusing each write into them
    where it is made, so that only the operations that wrote them fail (each is undone by
    its own savepoint) and the rest of the batch commits."""

    def __init__(self, trees: Collection[str]) -> None:
        super().__init__(", ".join(sorted(trees)))
        self.trees = frozenset(trees)


class Fence:
    """The fence of the store in ``schema``: none to pass (``tree_leases`` None) when the
    store is held alone, as its writer then owns every tree."""

    def __init__(self, tree_leases: PgLeases | None, schema: str, where: str) -> None:
        self.tree_leases = tree_leases
        self._where = where  # for messages: the URL without its password
        self._fence = fence_query(schema)
        self._birth = birth_query(schema)

    def check(self, tables: PgTables) -> set[str]:
        """Refuse the transaction unless each tree it writes is this writer's, under the
        token it holds, with a lease live when the transaction began; a tree nobody ever
        leased (one this transaction creates) gets this writer's lease, in this transaction.
        Read and share-locked in this very transaction, so a takeover that raises a token
        waits for this write, or this write runs again and is refused. Only the trees written count:
        a lapsed lease on one tree refuses no write to another, and a tree this writer does
        not hold (dropped, or another's) refuses every write into it. Returns the trees
        leased here."""
        if self.tree_leases is None:
            return set()
        trees = sorted(tables.trees())
        if not trees:
            return set()
        rows = {str(tree): (str(holder), int(token), bool(live)) for tree, holder, token, live
                in tables.query(self._fence, (trees,), "check the tree leases")}
        born, stale, lost_trees = _sorted_trees(trees, rows, self.tree_leases.held(),
                                                self.tree_leases.holder)
        if lost_trees:
            if not set(lost_trees) <= tables.refused:
                raise Refuse(lost_trees)
            raise self._fenced(lost_trees)
        if stale:
            tables.retry = True
            raise StorageError(f"the leases of tree {', '.join(stale)} were claimed after "
                               "this transaction began")
        if born:
            terms = self.tree_leases.terms()
            if terms is None:
                raise StorageError("a daemon sharing the store joins its members before it "
                                   "creates a tree", path=self._where)
            # Another writer leasing the same new tree at once conflicts with this insert
            # (a serialization failure: run again, then refused as its tree).
            tables.query(self._birth, (*terms, sorted(born)), "lease the new trees")
        return born

    def _fenced(self, trees: Collection[str]) -> StoreFenced:
        return StoreFenced(
            f"this daemon does not own tree {', '.join(sorted(trees))} (its lease was taken "
            f"over by another daemon, ran out, or was never this daemon's): nothing of this "
            f"operation was stored in {self._where!r}; send it again, to the tree's owner (a "
            "request to this daemon is answered with daemon:not_owner naming it)",
            path=self._where, trees=sorted(trees))


def _sorted_trees(trees: Iterable[str], stored: Mapping[str, tuple[str, int, bool]],
                  held: Mapping[str, int], holder: str) -> tuple[set[str], list[str], list[str]]:
    """The trees a write transaction writes, by what the fence makes of each: born (nobody
    ever leased it: this transaction leases it), stale (held under a token this snapshot
    does not show yet: claimed since it was taken, so run again) and lost (another's, run
    out, or not held). The rest are this holder's, live: written as they are."""
    born: set[str] = set()
    stale: list[str] = []
    lost_trees: list[str] = []
    for tree in trees:
        token, lease = held.get(tree), stored.get(tree)
        if token is not None and (lease is None or lease[1] < token):
            stale.append(tree)
        elif lease is None:
            born.add(tree)
        elif token is None or lease != (holder, token, True):
            lost_trees.append(tree)
    return born, stale, lost_trees
