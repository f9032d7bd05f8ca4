"""Tree leases: the semantics every store's ``Leases`` shares (``SoleLeases`` on memory and
LMDB, ``PgLeases`` on a shared PostgreSQL store), then fencing between two holders of one
PostgreSQL store: a writer whose lease was taken over stores nothing, and says so."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from treemail.adapters.store.factory import open_store
from treemail.adapters.store.leases import Leases, Member, leases_of, place
from treemail.core.errors import StoreFenced, StoreLocked
from treemail.core.keys import CounterName
from treemail.core.store import Store
from treemail.testing.postgres import PostgresCluster
from treemail.testing.store_contract import populate, snapshot

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
    leases.claim(TREE)
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


def test_a_writer_whose_lease_was_taken_over_is_fenced_and_stores_nothing(
    pair: tuple[Store, Store],
) -> None:
    store_a, store_b = pair
    a, b = leases_of(store_a), leases_of(store_b)
    a.join("/run/a.sock", 0.5)  # a short lease: A stops renewing, as if it stalled or died
    b.join("/run/b.sock", 30.0)
    assert a.claim(TREE).token == 1
    store_a.transact(lambda tx: tx.add(CounterName("by_a"), 1))  # its lease live: it writes
    _until(lambda: b.claim(TREE).holder == b.holder, "taken over after A's lease ran out")
    assert b.held() == {TREE: 2}
    before = _seen(store_b)
    with pytest.raises(StoreFenced, match="taken over by another daemon") as caught:
        store_a.transact(lambda tx: tx.add(CounterName("by_a"), 1))  # the stale token: refused
    assert caught.value.details["trees"] == [TREE]
    assert _seen(store_b) == before  # nothing of it was stored
    assert a.renew() == [TREE]  # A's heartbeat learns it lost the tree ...
    assert a.held() == {}
    # ... and writes its other trees again
    store_a.transact(lambda tx: tx.add(CounterName("by_a"), 1))
    store_b.transact(lambda tx: tx.add(CounterName("by_b"), 1))
    with store_b.read() as tx:
        assert (tx.count(CounterName("by_a")), tx.count(CounterName("by_b"))) == (2, 1)


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
