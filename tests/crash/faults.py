"""Fail every engine operation at each of its fault points, and check what the store kept.

For each case of ``tests/unit/operations.py`` (every public ``Engine`` operation): the case's
world is built once; the operation is then run on a fresh copy of it once without a fault,
which gives the state *after* it and the number of its fault points (each write through the
port, and the end of each commit), and once more for every fault point, failing there:

* ``raise``: ``InjectedFault`` raised in-process (memory and LMDB stores). The store object
  that saw the failure must read as before or after through the port (no cache may keep an
  undone write), and then, reopened as a restarted process finds it, hold exactly the rows
  of before or of after;
* ``exit``: a forked child runs the operation on an LMDB copy and leaves with ``os._exit`` at
  the fault point, as a killed process would, with no clean-up at all; this process then
  reopens the copy;
* ``lmdb``: below the port, an ``lmdb.Error`` at each put or delete LMDB is asked for (a
  transaction's rows reach LMDB when it flushes them) and at the commit itself, as a failing
  disk would raise it; then checked as ``raise`` is.

Never in between. Then the invariants of ``treemail.models.invariants`` must hold of the
reopened store: the caps and counters (``limits``), mail between peers of one tree
(``mail_shape``), ``recovered`` after ``recover()``, and ``settled`` after every session is
drained.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs
import lmdb

from tests.crash.harness import drain
from tests.unit.conftest import World
from tests.unit.operations import Case, InjectedFault, Op, WatchedStore
from treemail.adapters.store import lmdb_store, lmdb_txn
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import StorageError, TreemailError
from treemail.core.ids import CountingIds, IdSource
from treemail.core.keys import Table
from treemail.core.memory_store import MemoryStore
from treemail.core.store import Store
from treemail.models.invariants import Failure, Ledger, limits, mail_shape, recovered, settled

__all__ = ["MODES", "Campaign", "run_campaign"]

MODES = {"memory": ("raise",), "lmdb": ("raise", "exit", "lmdb")}
FAULTED, FINISHED, BROKEN = 17, 0, 70  # a forked child's exit codes


@attrs.define
class Campaign:
    """What a campaign did and found, so a test can show it was not vacuous."""

    faults: int = 0
    kept_before: int = 0
    kept_after: int = 0
    points: dict[str, dict[str, int]] = attrs.Factory(dict)  # per case, per mode
    outcomes: dict[str, str] = attrs.Factory(dict)  # per case, run without a fault
    failures: list[str] = attrs.Factory(list)
    # (case, mode, fault point) of each store found neither as before nor as after.
    between: list[tuple[str, str, int]] = attrs.Factory(list)


@attrs.define
class _Base:
    """A case's world, built, ready to be copied for each run."""

    kind: str
    directory: Path
    op: Op
    ids: IdSource
    config: MessagingConfig
    memory: MemoryStore | None = None

    def copy(self, where: Path) -> Store:
        if self.memory is not None:
            return self.memory.fork()
        shutil.copytree(self.directory, where)
        return LmdbStore.open(where, sync=False)

    def reopen(self, store: Store, where: Path) -> Store:
        """The store as a restarted process finds it."""
        if isinstance(store, MemoryStore):
            return store
        with suppress(TreemailError):
            store.close()
        return LmdbStore.open(where, sync=False)


def _build(case: Case, kind: str, directory: Path) -> _Base:
    if kind == "memory":
        store: Store = MemoryStore()
    else:
        store = LmdbStore.open(directory, sync=False)
    world = World(store)
    op = case.setup(world)
    base = _Base(kind, directory, op, copy.deepcopy(world.engine.ids), world.engine.config)
    if isinstance(store, MemoryStore):
        base.memory = store
    else:
        store.close()
    return base


def rows(store: Store) -> dict[str, Any]:
    """Every row of every table: raw bytes on LMDB, records in memory."""
    if isinstance(store, MemoryStore):
        return {table: store.rows(table) for table in Table}
    assert isinstance(store, LmdbStore)
    with store.raw_rows() as raw:
        return {table: dict(raw(table)) for table in Table}


def view(store: Store) -> dict[str, object]:
    """Everything a send could touch, read through the port (and its caches)."""
    return World(store).snapshot()


def _run(base: _Base, store: Store, at: int | None) -> tuple[str, int]:
    watched = WatchedStore(store, at)
    engine = Engine(watched, copy.deepcopy(base.ids), base.config)
    try:
        base.op(engine)
    except InjectedFault:
        return "fault", watched.points
    except TreemailError:
        return "refused", watched.points
    return "done", watched.points


@attrs.define
class _LmdbFaults:
    at: int | None
    points: int = 0

    def point(self) -> None:
        self.points += 1
        if self.points == self.at:
            raise lmdb.Error("fault injected by the test")


@contextmanager
def _lmdb_faults(at: int | None) -> Iterator[_LmdbFaults]:
    """Fault points below the port: every put or delete LMDB is asked for, and the commit."""
    faults = _LmdbFaults(at)
    write, commit = lmdb_txn.LmdbTables._to_lmdb, lmdb_store._commit_durably

    def failing_write(self: lmdb_txn.LmdbTables, rows: list[tuple[bytes, bytes | None]]) -> None:
        # Row by row, so that a fault can fall between any two of a flush's writes.
        for row in rows:
            faults.point()
            write(self, [row])

    def failing_commit(txn: Any) -> None:
        faults.point()
        commit(txn)

    lmdb_txn.LmdbTables._to_lmdb = failing_write  # type: ignore[method-assign]
    lmdb_store._commit_durably = failing_commit
    try:
        yield faults
    finally:
        lmdb_txn.LmdbTables._to_lmdb = write  # type: ignore[method-assign]
        lmdb_store._commit_durably = commit


def _run_lmdb(base: _Base, store: Store, at: int | None) -> tuple[str, int]:
    engine = Engine(store, copy.deepcopy(base.ids), base.config)
    with _lmdb_faults(at) as faults:
        try:
            base.op(engine)
        except StorageError as exc:
            return ("fault" if "fault injected" in exc.message else "refused"), faults.points
        except TreemailError:
            return "refused", faults.points
    return "done", faults.points


def _run_in_child(base: _Base, where: Path, at: int) -> int:
    shutil.copytree(base.directory, where)
    pid = os.fork()
    if pid == 0:  # the child: no clean-up of any kind, whatever happens
        code = BROKEN
        try:
            store = LmdbStore.open(where, sync=False)
            watched = WatchedStore(store, at, fault=lambda: os._exit(FAULTED))
            with suppress(TreemailError):
                base.op(Engine(watched, base.ids, base.config))
            code = FINISHED
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def invariant_failures(store: Store, config: MessagingConfig) -> list[Failure]:
    found: list[Failure | None] = []
    with store.read() as tx:
        accepted = Ledger().then(tx.feed()).accepted
        found.append(limits(tx, config))
        world: Any = SimpleNamespace(messages=dict.fromkeys(accepted))  # mail_shape reads ids
        found.append(mail_shape(tx, world, config))
    engine = Engine(store, CountingIds(namespace=0xFA17), config)
    engine.recover()
    with store.read() as tx:
        found.append(recovered(tx))
    drain(engine)
    with store.read() as tx:
        found.append(settled(tx))
    return [failure for failure in found if failure is not None]


def _judge(campaign: Campaign, what: str, fault: tuple[str, str, int], kept: dict[str, Any],
           before: dict[str, Any], after: dict[str, Any]) -> bool:
    if kept == before:
        campaign.kept_before += 1
    elif kept == after:
        campaign.kept_after += 1
    else:
        changed = sorted(t for t in kept if kept[t] not in (before[t], after[t]))
        campaign.failures.append(f"{what}: the store is neither as before nor as after the "
                                 f"operation (tables {changed})")
        campaign.between.append(fault)
        return False
    return True


def _lmdb_points(base: _Base, directory: Path, after: dict[str, Any]) -> int:
    """How many LMDB writes and commits the operation makes (the port's points are counted
    by the run that found the state after it)."""
    store = base.copy(directory / "counted")
    _, points = _run_lmdb(base, store, None)
    assert rows(store) == after, "the operation does not repeat itself exactly"
    store.close()
    return points


def _fail(campaign: Campaign, base: _Base, mode: str, at: int, where: Path, what: str,
          views: tuple[object, object]) -> Store | None:
    """Run the operation failing at fault point ``at``; the store as a restart finds it."""
    if mode == "exit":
        code = _run_in_child(base, where, at)
        if code != FAULTED:
            campaign.failures.append(f"{what}: the child ended with {code}")
            return None
        return LmdbStore.open(where, sync=False)
    store = base.copy(where)
    ended, _ = (_run_lmdb if mode == "lmdb" else _run)(base, store, at)
    if ended != "fault":
        campaign.failures.append(f"{what}: no fault reached ({ended})")
    if view(store) not in views:
        campaign.failures.append(f"{what}: the failed store reads as neither before nor after")
    return base.reopen(store, where)


def _one_case(campaign: Campaign, case: Case, kind: str, modes: tuple[str, ...],
              directory: Path) -> None:
    base = _build(case, kind, directory / "base")
    start = base.copy(directory / "before")
    before, before_view = rows(start), view(start)
    outcome, points = _run(base, start, None)
    after, after_view = rows(start), view(start)
    start.close()
    campaign.outcomes[case.id] = outcome
    campaign.points[case.id] = {mode: points if mode != "lmdb" else
                                _lmdb_points(base, directory, after) for mode in modes}
    for mode, count in campaign.points[case.id].items():
        for at in range(1, count + 1):
            where = directory / f"{mode}{at}"
            what = f"{case.id} [{kind}, {mode} at fault point {at} of {count}]"
            campaign.faults += 1
            store = _fail(campaign, base, mode, at, where, what, (before_view, after_view))
            if store is None:
                continue
            if _judge(campaign, what, (case.id, mode, at), rows(store), before, after):
                for failure in invariant_failures(store, base.config):
                    campaign.failures.append(f"{what}: invariant {failure[0]}: {failure[1]}")
            store.close()
            if kind == "lmdb":
                shutil.rmtree(where)


def run_campaign(cases: tuple[Case, ...], kind: str, directory: Path,
                 modes: tuple[str, ...] | None = None) -> Campaign:
    campaign = Campaign()
    for n, case in enumerate(cases):
        _one_case(campaign, case, kind, modes or MODES[kind], directory / f"case{n}")
    return campaign

