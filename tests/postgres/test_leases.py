"""Tree leases: the semantics every store's ``Leases`` shares (``SoleLeases`` on memory and
LMDB, ``PgLeases`` on a shared PostgreSQL store), then fencing between two holders of one
PostgreSQL store: a writer whose lease was taken over stores nothing, and says so."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import agent
from treemail.adapters.store.factory import open_store
from treemail.adapters.store.group_commit import GroupStore
from treemail.adapters.store.leases import Leases, Member, leases_of, place
from treemail.core.engine import Engine
from treemail.core.errors import StoreFenced, StoreLocked
from treemail.core.ids import CountingIds
from treemail.core.keys import CounterName
from treemail.core.records import Owner
from treemail.core.store import Store, WriteTxn
from treemail.testing.postgres import PostgresCluster
from treemail.testing.store_sample import populate, snapshot

TREE = "00000001-0000-4000-8000-000000000000"
OTHER = "00000002-0000-4000-8000-000000000000"


@pytest.fixture(params=["memory", "lmdb", "postgresql"])
def leased(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Leases]]:
    if request.param == "postgresql":
        server: PostgresCluster = request.getfixturevalue("postgres_cluster")
        store = open_store(server.url(), sync=False, shared=True)
    else:
        store = open_store("memory:" if request.param == "memory" else str(tmp_path / "db"),
                           sync=False, shared=True)
    leases = leases_of(store)
    leases.join("/run/a.sock", 30.0)
    yield store, leases
    store.close()


def test_a_claim_of_a_free_tree_is_ours_with_the_first_token(
    leased: tuple[Store, Leases],
) -> None:
    _, leases = leased
    lease = leases.claim(TREE)
    assert (lease.holder, lease.address, lease.token, lease.live) == (
        leases.holder, "/run/a.sock", 1, True)
    assert leases.held() == {TREE: 1}
    assert leases.lease(TREE) == lease
    assert leases.lease(OTHER) is None


def test_claiming_again_keeps_the_token_and_a_release_then_claim_raises_it(
    leased: tuple[Store, Leases],
) -> None:
    _, leases = leased
    assert leases.claim(TREE).token == 1
    assert leases.claim(TREE).token == 1  # ours and live: extended, not a new epoch
    leases.release(TREE)
    assert leases.held() == {}
    released = leases.lease(TREE)
    assert released is not None and not released.live
    assert TREE in leases.expired()
    assert leases.claim(TREE).token == 2  # tokens only grow, so an old writer stays fenced
    assert leases.renew() == []
    assert leases.held() == {TREE: 2}


def test_members_count_their_live_trees_and_leaving_gives_everything_up(
    leased: tuple[Store, Leases],
) -> None:
    _, leases = leased
    leases.claim(TREE)
    leases.claim(OTHER)
    assert leases.members() == [Member(leases.holder, "/run/a.sock", 2)]
    leases.leave()
    assert leases.held() == {} and leases.members() == []
    assert sorted(leases.expired()) == [TREE, OTHER]


def test_a_holder_writes_while_its_leases_are_live(leased: tuple[Store, Leases]) -> None:
    store, leases = leased
    leases.claim(TREE)  # and OTHER, which nobody ever leased, is leased by the write itself
    store.transact(populate)
    assert _seen(store)["counts"]


def test_placement_is_the_fewest_live_trees_then_the_lowest_id() -> None:
    assert place([]) is None
    members = [Member("b", "/b", 1), Member("c", "/c", 0), Member("a", "/a", 0)]
    assert place(members) == Member("a", "/a", 0)
    assert place([Member("a", "/a", 3), Member("b", "/b", 2)]) == Member("b", "/b", 2)


# -- two holders of one PostgreSQL store -------------------------------------------------------


def _seen(store: Store) -> dict[str, Any]:
    with store.read() as tx:
        return snapshot(tx)


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout}s")
        time.sleep(0.02)


@pytest.fixture
def pair(postgres_cluster: PostgresCluster) -> Iterator[tuple[Store, Store]]:
    url = postgres_cluster.url()
    first = open_store(url, sync=False, shared=True)
    second = open_store(url, sync=False, shared=True)
    yield first, second
    first.close()
    second.close()


def test_a_live_lease_is_not_taken_and_its_holder_is_named(pair: tuple[Store, Store]) -> None:
    a, b = (leases_of(store) for store in pair)
    a.join("/run/a.sock", 30.0)
    b.join("/run/b.sock", 30.0)
    a.claim(TREE)
    refused = b.claim(TREE)
    assert (refused.holder, refused.address, refused.token) == (a.holder, "/run/a.sock", 1)
    assert b.held() == {} and a.held() == {TREE: 1}
    assert place(b.members()) == Member(b.holder, "/run/b.sock", 0)  # the one with none


def _note(tree: str) -> Callable[[WriteTxn], None]:
    """A write into ``tree``: an event of its root session."""
    def note(tx: WriteTxn) -> None:
        tx.append(tree, "note", {})

    return note


def _notes(store: Store, tree: str) -> int:
    with store.read() as tx:
        return len(list(tx.events(tree)))


def test_a_writer_whose_lease_was_taken_over_is_fenced_in_that_tree_alone(
    pair: tuple[Store, Store],
) -> None:
    store_a, store_b = pair
    a, b = leases_of(store_a), leases_of(store_b)
    a.join("/run/a.sock", 0.5)  # a short lease on TREE: A stops renewing, as if it stalled
    assert a.claim(TREE).token == 1
    a.join("/run/a.sock", 30.0)  # and a long one on OTHER, which A keeps
    assert a.claim(OTHER).token == 1
    b.join("/run/b.sock", 30.0)
    store_a.transact(_note(TREE))  # its lease live: it writes
    _until(lambda: b.claim(TREE).holder == b.holder, "taken over after A's lease ran out")
    assert b.held() == {TREE: 2}
    before = _seen(store_b)
    with pytest.raises(StoreFenced, match="taken over by another daemon") as caught:
        store_a.transact(_note(TREE))  # the stale token: refused
    assert caught.value.details["trees"] == [TREE]
    assert _seen(store_b) == before and _notes(store_b, TREE) == 1  # nothing of it stored
    # A's lapsed lease on TREE refuses no write into OTHER, which A still holds, even
    # before its heartbeat learns of the loss.
    store_a.transact(_note(OTHER))
    assert a.renew() == [TREE]  # A's heartbeat learns it lost the tree ...
    assert a.held() == {OTHER: 1}
    with pytest.raises(StoreFenced):  # ... and a tree it no longer holds stays closed to it
        store_a.transact(_note(TREE))
    store_a.transact(_note(OTHER))
    store_b.transact(_note(TREE))
    assert (_notes(store_b, TREE), _notes(store_b, OTHER)) == (2, 2)


def test_in_a_group_commit_only_the_operation_writing_a_lost_tree_is_refused(
    pair: tuple[Store, Store],
) -> None:
    store_a, store_b = pair
    a, b = leases_of(store_a), leases_of(store_b)
    a.join("/run/a.sock", 30.0)
    b.join("/run/b.sock", 30.0)
    a.claim(OTHER)
    b.claim(TREE)
    group = GroupStore(store_a)
    refused: list[StoreFenced] = []

    def batch() -> None:
        group.transact(_note(OTHER))
        try:
            group.transact(_note(TREE))  # B's tree: this operation alone is undone
        except StoreFenced as fenced:
            refused.append(fenced)
        group.transact(_note(OTHER))

    group.batch(batch)
    assert refused and refused[-1].details["trees"] == [TREE]
    assert (_notes(store_b, TREE), _notes(store_b, OTHER)) == (0, 2)


def test_a_write_whose_snapshot_predates_its_own_claim_is_run_again_not_fenced(
    pair: tuple[Store, Store],
) -> None:
    """A daemon takes a tree over and recovers it at once; the recovery may join a group
    commit whose transaction (and snapshot) began before the claim. That snapshot shows the
    old lease: the write is run again on a fresh one, not refused (a refused recovery left
    the tree claimed and never recovered: its mail stuck for ever)."""
    store_a, store_b = pair
    a, b = leases_of(store_a), leases_of(store_b)
    a.join("/run/a.sock", 0.3)
    a.claim(TREE)
    b.join("/run/b.sock", 30.0)
    b.claim(OTHER)
    _until(lambda: TREE in b.expired(), "A's lease ran out")
    attempts: list[int] = []

    def work(tx: WriteTxn) -> None:
        attempts.append(tx.count(CounterName("anything")))  # the snapshot is taken here
        if len(attempts) == 1:
            assert b.claim(TREE).token == 2  # the takeover commits after the snapshot
        tx.append(TREE, "recovered", {})

    store_b.transact(work)
    assert len(attempts) == 2 and b.held() == {OTHER: 1, TREE: 2}
    assert _notes(store_b, TREE) == 1


def test_an_embedded_writer_and_sharing_daemons_keep_each_other_out(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url()
    shared = open_store(url, sync=False, shared=True)
    leases_of(shared).join("/run/a.sock", 30.0)
    with pytest.raises(StoreLocked, match=r"shared by treemail daemons \(at /run/a\.sock\)"):
        open_store(url, sync=False)
    shared.close()
    alone = open_store(url, sync=False)
    try:
        with pytest.raises(StoreLocked):
            open_store(url, sync=False, shared=True)
    finally:
        alone.close()


def test_a_tree_is_born_with_its_creators_lease_in_the_same_transaction(
    pair: tuple[Store, Store],
) -> None:
    """Placement leaves no window: the transaction that creates a tree leases it to its
    creator, so no other daemon ever finds the tree without an owner (and claims it)."""
    store_a, store_b = pair
    a, b = leases_of(store_a), leases_of(store_b)
    a.join("/run/a.sock", 30.0)
    b.join("/run/b.sock", 30.0)
    engine = Engine(store_a, CountingIds())

    def created_then_refused(tx: WriteTxn) -> None:
        engine._create(tx, agent("root"), None, False)
        raise StoreFenced("refused after the create")

    with pytest.raises(StoreFenced, match="after the create"):
        store_a.transact(created_then_refused)
    assert a.held() == {} and _seen(store_b)["sessions"] == []  # neither tree ...
    assert [m.trees for m in b.members()] == [0, 0] and b.expired() == []  # ... nor lease
    root = engine.create_root(agent("root")).session_id
    assert a.held() == {root: 1}
    lease = b.lease(root)  # what the other daemon sees as soon as the tree exists
    assert lease is not None and (lease.holder, lease.token, lease.live) == (a.holder, 1, True)
    assert b.claim(root).holder == a.holder
    with pytest.raises(StoreFenced):  # and B cannot write into it
        Engine(store_b, CountingIds()).accept(root, "hello", Owner.USER)
