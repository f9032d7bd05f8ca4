"""Group commit: many engine operations in one durable write transaction.

``GroupStore`` wraps a ``Store``. Outside a batch it is the store itself. Inside
``batch(work)``, which runs ``work`` in one write transaction of the wrapped store, every
``transact`` of that thread runs its work in a savepoint (nested transaction) of the batch's
transaction, and every ``read`` reads that transaction. So an engine over a ``GroupStore``
needs no change: each of its operations still sees one transaction per ``transact``, and a
refused or failing one is undone alone by its savepoint, leaving its neighbours in the batch
as they were. The guards stay exact: each operation reads the batch's transaction, which
holds everything the operations before it wrote.

The batch commits once at the end. Whoever runs a batch must answer its callers only after
``batch`` returns, since only then is anything of it durable; if the commit fails, nothing
of the batch was kept. A store may run ``work`` again from scratch (growing a full map), so
``work`` must keep its results fresh on each run (``adapters/runtime/writer.py``'s ``Writer``
does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar

from treemail.core.store import ReadTxn, Store, WriteTxn

__all__ = ["GroupStore"]

T = TypeVar("T")


class GroupStore:
    """A ``Store`` whose transactions join the batch open on the calling thread, if any."""

    def __init__(self, store: Store) -> None:
        self.inner = store
        self._local = threading.local()

    def _open(self) -> WriteTxn | None:
        txn: WriteTxn | None = getattr(self._local, "txn", None)
        return txn

    def batch(self, work: Callable[[], T]) -> T:
        """Run ``work`` with every ``transact`` and ``read`` of this thread inside one write
        transaction, committed once when ``work`` returns (undone whole if it raises)."""
        if self._open() is not None:
            raise RuntimeError("a batch is already open on this thread; batches do not nest")

        def outer(txn: WriteTxn) -> T:
            self._local.txn = txn
            try:
                return work()
            finally:
                self._local.txn = None

        return self.inner.transact(outer)

    @property
    def batching(self) -> bool:
        """Whether this thread is inside ``batch``."""
        return self._open() is not None

    def read(self) -> AbstractContextManager[ReadTxn]:
        txn = self._open()
        return self.inner.read() if txn is None else _borrow(txn)

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        txn = self._open()
        if txn is None:
            return self.inner.transact(work)
        with txn.savepoint() as nested:
            return work(nested)

    def own(self, holder: Mapping[str, str]) -> None:
        self.inner.own(holder)

    def close(self) -> None:
        self.inner.close()


@contextmanager
def _borrow(txn: WriteTxn) -> Iterator[ReadTxn]:
    # The batch's write transaction serves reads: it sees what the batch wrote so far.
    yield txn
