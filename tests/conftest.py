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
