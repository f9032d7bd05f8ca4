"""The differential suite on the PostgreSQL store: the engine over ``PostgresStore`` and the
reference model, side by side, step by step, at the same profile as the main suite, with
and without group commit. Each
example's store is a schema of its own on the session's throwaway server; a restart closes
it and opens the same schema again, as a process that died and came back would."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.property.test_differential import DifferentialMachine
from tests.property.test_differential_group import GroupCommitMachine
from treemail.core.store import Store
from treemail.testing.postgres import PostgresCluster

_SERVER: list[PostgresCluster] = []


@pytest.fixture(autouse=True)
def _server(postgres_cluster: PostgresCluster) -> Iterator[None]:
    _SERVER.append(postgres_cluster)
    yield
    _SERVER.clear()


class PostgresMachine(DifferentialMachine):
    url: str | None = None

    def _open_store(self) -> Store:
        from treemail import open_store

        if self.url is None:
            self.url = _SERVER[0].url()
            # A restart closes and reopens the store when ``directory`` is set; teardown's
            # rmtree of it finds no such directory and ignores that.
            self.directory = self.url
        return open_store(self.url, sync=False)


TestDifferentialPostgres = PostgresMachine.TestCase
# A quarter of the profile's examples, each of its full length: every step is a round trip
# or several to a server, and the whole profile (200 examples) took 7.5 minutes on a loaded
# 2-core machine, three times `just test`'s budget. `just deep` runs a quarter of the deep
# profile's (625), and `just diff-pg` (TREEMAIL_PG_DIFF_FULL=1) the whole ci one.
if not os.environ.get("TREEMAIL_PG_DIFF_FULL"):
    TestDifferentialPostgres.settings = settings(
        TestDifferentialPostgres.settings,
        max_examples=max(TestDifferentialPostgres.settings.max_examples // 4, 1))


class GroupCommitPostgresMachine(GroupCommitMachine, PostgresMachine):
    """Group commit on PostgreSQL: a burst is one transaction, each operation a savepoint
    (queued with the writes, never sent when undone unsent: ``postgres_txn``)."""


TestGroupCommitPostgres = GroupCommitPostgresMachine.TestCase
# An eighth of the profile's examples (half of the quarter above), as the LMDB group suite
# runs half of its main suite's.
TestGroupCommitPostgres.settings = settings(
    TestGroupCommitPostgres.settings,
    max_examples=max(TestGroupCommitPostgres.settings.max_examples // 8, 1))
