"""``treemail check`` at its default bounds reaches everything it reports on: every send
guard, every transition of every lifecycle the core declares (approvals too), every grant
scope an approval is answered in and every step of the external boundary, and finds
nothing, in exactly ``DEFAULT_STATES`` states. 26 to 44 minutes on two cores (48 to
78 CPU minutes), so it runs with ``just deep``; the suite checks each part at small bounds
(``tests/property/test_checker.py``, the depth-5 search pinned there)."""

from __future__ import annotations

import pytest

from treemail.models.checker import DEFAULT_CONFIG, DEFAULT_STATES
from treemail.models.command import workers_available
from treemail.models.coverage import ALL_GUARDS, ALL_SCOPES, ALL_TRANSITIONS, BOUNDARY
from treemail.models.parallel import check


@pytest.mark.deep
def test_the_default_bounds_reach_every_guard_transition_and_scope() -> None:
    result = check(DEFAULT_CONFIG, workers=max(1, workers_available()))
    assert result.counterexample is None, result.counterexample
    coverage = result.coverage
    assert coverage.guards >= set(ALL_GUARDS)
    assert coverage.transitions == ALL_TRANSITIONS
    assert coverage.scopes == set(ALL_SCOPES)
    assert coverage.boundary == set(BOUNDARY)  # the default attaches an external session
    assert coverage.complete, coverage.line()
    assert result.states == DEFAULT_STATES
