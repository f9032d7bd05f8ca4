"""Hypothesis profiles for the whole suite, chosen by ``HYPOTHESIS_PROFILE`` (default ``ci``).

``ci`` keeps ``just test`` fast on a 2-core machine; ``deep`` is for ``just deep``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings

from treemail.testing.postgres import PostgresCluster, PostgresMissing

settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # The explain phase re-runs a failing stateful example hundreds of times: minutes, not
    # seconds, for a report the shrunk steps already give.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
settings.register_profile(
    "deep",
    max_examples=2500,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
_profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# ``TREEMAIL_EXAMPLES`` sizes a run beyond its profile (``just fuzz 25000``): the fuzz
# surfaces scale their budgets from ``max_examples``, so one number sets a long run's length.
if examples := os.environ.get("TREEMAIL_EXAMPLES"):
    settings.register_profile(
        f"{_profile}-sized", settings.get_profile(_profile), max_examples=int(examples)
    )
    _profile = f"{_profile}-sized"
settings.load_profile(_profile)


# The suite's longest tests (30 s to 2 minutes each on a loaded 2-core machine, measured with
# ``--durations``), started first. xdist's work stealing hands each worker a run of the tests
# in collection order and lets an idle worker take only tests not yet started, so a long test
# collected late runs alone at the end while the other core idles: the last five minutes of a
# twelve-minute suite once ran on one core. A test renamed away from this list only loses its
# place in the queue.
SLOW_FIRST = (
    "tests/property/test_differential_postgres.py",
    "tests/property/test_checker_parallel.py::test_any_number_of_workers_explores_the_same_states",
    "tests/property/test_planted_bugs.py::test_without_a_plant_the_same_hunt_passes",
    "tests/property/test_differential.py",
    "tests/crash/test_kill.py::test_sigkill_campaign_loses_nothing_and_delivers_once",
    "tests/property/test_checker_parallel.py::test_a_planted_bug_gets_the_same_counterexample",
    "tests/property/test_differential_group.py",
    "tests/property/test_checker.py::test_a_bug_only_the_newer_actions_reach_is_caught",
    "tests/property/test_checker.py::test_the_engine_passes_and_the_search_is_real",
    "tests/crash/test_soak.py",
    "tests/property/test_planted_bugs.py::test_the_suite_finds_the_planted_bug",
    "tests/postgres/test_kill_send.py",
    "tests/crash/test_kill_group.py",
    "tests/crash/test_fault_every_write.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of ``SLOW_FIRST`` moved to the front, in its order; the rest keep theirs."""
    def rank(item: pytest.Item) -> int:
        return next((at for at, prefix in enumerate(SLOW_FIRST)
                     if item.nodeid.startswith(prefix)), len(SLOW_FIRST))

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _recursion_limit_kept() -> Iterator[None]:
    """The interpreter's recursion limit is the process's, not the test's: a test that
    leaves it changed (mypy's API raises it for good) changes what a later test in the same
    xdist worker sees, such as how deep a frame's JSON may nest, and which test that is
    depends on how the workers share the suite out. Failing the test that changed it makes
    that a failure of its own, in any order."""
    limit = sys.getrecursionlimit()
    yield
    assert sys.getrecursionlimit() == limit, (
        f"this test left the recursion limit at {sys.getrecursionlimit()} (was {limit}): "
        "restore it, or run what changes it in a subprocess")


# -- a throwaway PostgreSQL server, once per test session (per xdist worker) -------------------



@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL server on a Unix socket in a temp dir, stopped after the session. Its
    absence fails the tests that need it, saying what to install; it never skips them."""
    try:
        cluster = PostgresCluster.start()
    except PostgresMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
