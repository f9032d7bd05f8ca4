"""``treemail check`` at its default bounds reaches everything it reports on: every send
guard, every transition of every lifecycle the core declares (approvals too) and every grant
scope an approval is answered in, and finds nothing. Minutes of CPU, so it runs with
``just deep``; the suite checks the approval part at small bounds
(``tests/property/test_checker.py``)."""

from __future__ import annotations

import pytest

from treemail.models.checker import DEFAULT_CONFIG, DEFAULT_STATES
from treemail.models.command import workers_available
from treemail.models.coverage import ALL_GUARDS, ALL_SCOPES, ALL_TRANSITIONS
from treemail.models.parallel import check


@pytest.mark.deep
def test_the_default_bounds_reach_every_guard_transition_and_scope() -> None:
    result = check(DEFAULT_CONFIG, workers=max(1, workers_available()))
    assert result.counterexample is None, result.counterexample
    coverage = result.coverage
    assert coverage.guards >= set(ALL_GUARDS)
    assert coverage.transitions == ALL_TRANSITIONS
    assert coverage.scopes == set(ALL_SCOPES)
    assert coverage.complete, coverage.line()
    assert result.states == DEFAULT_STATES
