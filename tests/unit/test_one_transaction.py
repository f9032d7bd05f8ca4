"""One engine operation, one store transaction: each public operation of ``Engine`` opens
exactly one write transaction when it writes and none when it only reads, on every store.

Two transactions would let a failure or a crash between them keep the first half (a request
committed without its model output, mail accepted but its recipient never woken) while the
caller is told the operation failed and changed nothing. The cases are in
``tests/unit/operations.py``; an operation without one fails ``test_every_operation_has_a_case``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.unit.conftest import STORES, World, open_store
from tests.unit.operations import (
    CASES,
    WRITES,
    Case,
    WatchedStore,
    cases_of,
    missing_operations,
    split_commit_request,
)
from treemail.core.engine import Engine
from treemail.core.errors import TreemailError
from treemail.testing.postgres import PostgresCluster

# What each read-only case is allowed: no write transaction at all.
READ_ONLY = sorted({case.operation for case in CASES if case.writes == 0})


def transactions(case: Case, kind: str, directory: Path,
                 server: PostgresCluster | None = None) -> tuple[int, int]:
    """The write transactions and reads the case's operation asked its store for."""
    store = open_store(kind, directory, server)
    try:
        world = World(store)
        op = case.setup(world)
        watched = WatchedStore(store)
        # A refusal is an outcome: it still used exactly one transaction.
        with contextlib.suppress(TreemailError):
            op(Engine(watched, world.engine.ids, world.engine.config))
        return watched.transactions, watched.reads
    finally:
        store.close()


def miscounted(cases: tuple[Case, ...], kind: str, directory: Path,
               server: PostgresCluster | None = None) -> list[str]:
    """Each case whose operation did not open exactly its number of write transactions."""
    wrong = []
    for n, case in enumerate(cases):
        opened, _ = transactions(case, kind, directory / str(n), server)
        if opened != case.writes:
            wrong.append(f"{case.id} opened {opened} write transactions, not {case.writes}")
    return wrong


def test_every_operation_has_a_case() -> None:
    assert missing_operations() == set(), "give each new Engine operation a case in CASES"


def test_the_read_only_operations_are_these() -> None:
    # Stated, so that an operation moving between reading and writing is a visible change.
    assert READ_ONLY == ["approvals", "events", "feed", "feed_end", "message", "message_status",
                         "pending",
                         "rules_of", "run", "session", "sessions", "shutdown",
                         "stranded_delegations", "tool_visible"]


def test_the_fault_points_are_every_write_of_the_port() -> None:
    expected = {"put_session", "put_run", "put_message", "add", "remember", "accept_mail",
                "append", "put_approval"}
    assert expected == WRITES


@pytest.mark.parametrize("kind", STORES)
def test_each_operation_is_one_write_transaction(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    assert miscounted(CASES, kind, tmp_path, _server(kind, request)) == []


def test_the_read_only_operations_read() -> None:
    # Not vacuous: a read-only case reads its store (rules_of and shutdown need none).
    for case in CASES:
        if case.writes == 0 and case.operation not in ("rules_of", "shutdown"):
            _, reads = transactions(case, "memory", Path("unused"))
            assert reads >= 1, case.id


@pytest.mark.parametrize("kind", STORES)
def test_the_count_catches_an_operation_split_in_two(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The broken build: commit_request commits its request and its output apart."""
    server = _server(kind, request)
    with split_commit_request():
        wrong = miscounted(cases_of("commit_request"), kind, tmp_path, server)
    assert wrong == ["commit_request:consumes mail, with the model's output opened 2 write "
                     "transactions, not 1"]


def _server(kind: str, request: pytest.FixtureRequest) -> PostgresCluster | None:
    """The session's throwaway PostgreSQL server, for the postgresql kind."""
    if kind != "postgresql":
        return None
    server: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return server
