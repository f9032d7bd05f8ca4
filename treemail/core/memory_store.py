"""``MemoryStore``: the Store port in plain dicts, with an undo log for its transactions.

The reference backend of the store contract tests, and the model checker's store: it forks
per explored state, so its transactions and copies are kept cheap rather than general.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from treemail.core.errors import StoreClosed
from treemail.core.keys import Table
from treemail.core.store import Indexed, ReadTxn, WriteTxn

__all__ = ["MemoryStore"]

T = TypeVar("T")

_MISSING: Any = object()


class _Closed(dict[Table, dict[bytes, Any]]):
    """The tables of a closed MemoryStore: any use raises, as a closed LMDB store does, at
    no cost to the open store's hot path."""

    def __missing__(self, table: Table) -> dict[bytes, Any]:
        raise StoreClosed("the memory store is closed; open a new one")


class _DictTables:
    """``Tables`` in dicts, with an undo log so a transaction rolls back by replaying it
    backwards."""

    def __init__(self, data: dict[Table, dict[bytes, Any]] | None = None) -> None:
        self.data = data if data is not None else {table: {} for table in Table}
        # (rows, key, old value or _MISSING), replayed backwards to roll back.
        self.undo: list[tuple[dict[bytes, Any], bytes, Any]] = []

    def get(self, table: Table, key: bytes) -> Any:
        return self.data[table].get(key)

    def put(self, table: Table, key: bytes, value: object) -> None:
        rows = self.data[table]
        self.undo.append((rows, key, rows.get(key, _MISSING)))
        rows[key] = value

    insert = put

    def put_rows(self, rows: Iterable[tuple[Table, bytes, object]]) -> None:
        for table, key, value in rows:
            self.put(table, key, value)

    def delete(self, table: Table, key: bytes) -> None:
        rows = self.data[table]
        if key in rows:
            self.undo.append((rows, key, rows.pop(key)))

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        rows = self.data[table]
        if not prefix and not start:
            return sorted(rows.items())
        low = prefix + start
        found = [row for row in rows.items() if row[0] >= low and row[0].startswith(prefix)]
        found.sort()
        return found

    def size(self, table: Table) -> int:
        return len(self.data[table])

    def rollback_to(self, mark: int) -> None:
        undo = self.undo
        while len(undo) > mark:
            rows, key, old = undo.pop()
            if old is _MISSING:
                rows.pop(key, None)
            else:
                rows[key] = old


class _MemoryTxn(Indexed):
    def __init__(self, tables: _DictTables) -> None:
        super().__init__(tables)
        self._dicts = tables

    def savepoint(self) -> _Savepoint:
        return _Savepoint(self)

    # Entered and left by hand rather than through ``contextmanager``: the model checker opens
    # one transaction and a read or two per step, and a generator-based manager cost more
    # than the store's own dict work for most of them.
    def __enter__(self) -> _MemoryTxn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Savepoint:
    """A nested transaction of a memory store: its writes are undone if its block raises."""

    __slots__ = ("_mark", "_txn")

    def __init__(self, txn: _MemoryTxn) -> None:
        self._txn = txn
        self._mark = len(txn._dicts.undo)

    def __enter__(self) -> WriteTxn:
        return self._txn

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            self._txn._dicts.rollback_to(self._mark)


class MemoryStore:
    """A Store in plain dicts: the reference for the store contract tests, and fast for models."""

    def __init__(self) -> None:
        self._tables = _DictTables()

    def read(self) -> AbstractContextManager[ReadTxn]:
        self._check_open()
        return _MemoryTxn(self._tables)

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        self._check_open()
        tables = self._tables
        mark = len(tables.undo)
        try:
            result = work(_MemoryTxn(tables))
        except BaseException:
            tables.rollback_to(mark)
            raise
        tables.undo.clear()
        return result

    def fork(self) -> MemoryStore:
        """An independent copy of this store, cheap enough to take per explored state.

        Table by table, not a deep copy: every stored value is a frozen record, an id, a count
        or event data the engine never mutates after appending, so the copies may share them.
        """
        self._check_open()
        twin = MemoryStore()
        twin._tables = _DictTables({table: dict(rows) for table, rows in self._tables.data.items()})
        return twin

    def rows(self, table: Table) -> dict[bytes, Any]:
        """A copy of one table's rows by key: for tests and audits that look under the port."""
        self._check_open()
        return dict(self._tables.data[table])

    def own(self, holder: Mapping[str, str]) -> None:
        """A memory store lives in one process, whose it is: there is no one to refuse."""
        self._check_open()

    def close(self) -> None:
        """Close the store; later use of it, or of a transaction it gave, raises."""
        self._tables.data = _Closed()

    def _check_open(self) -> None:
        if isinstance(self._tables.data, _Closed):
            raise StoreClosed("the memory store is closed; open a new one")
