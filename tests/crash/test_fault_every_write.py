"""A fault at every write of every engine operation leaves the store as before the operation or
as after it, never in between, and sound (``tests/crash/faults.py`` says how).

The SIGKILL campaigns (``test_kill.py``) land wherever a timer falls; this one visits every
fault point of every public operation, in-process on both stores and by a forked child that
exits there on LMDB, and at every write LMDB itself is asked for.
``test_the_campaign_catches_an_operation_split_in_two`` runs it on a broken build to show it
can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.faults import MODES, run_campaign
from tests.unit.conftest import STORES
from tests.unit.operations import CASES, cases_of, split_commit_request

WRITING = tuple(case for case in CASES if case.writes)
# The campaign judges a fault by reopening copies of the store's files (LMDB) or its memory:
# the stores whose atomicity is treemail's own code. PostgreSQL's is the server's: a writer
# killed mid-transaction is tested in tests/unit/test_postgres_store.py.
KINDS = [kind for kind in STORES if kind in MODES]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_at_any_write_keeps_before_or_after(kind: str, tmp_path: Path) -> None:
    campaign = run_campaign(WRITING, kind, tmp_path)
    assert campaign.failures == []
    # Not vacuous: every writing case but the refused send (which commits nothing) ran to
    # its end and had fault points, faults undid operations, and the faults after a last
    # commit kept what it committed.
    refused = {case for case, outcome in campaign.outcomes.items() if outcome != "done"}
    assert refused == {"send_message:a refused call"}, campaign.outcomes
    assert all(campaign.points[case.id][mode] >= 1 for case in WRITING
               if case.id not in refused for mode in MODES[kind]), campaign.points
    assert campaign.faults == sum(n for modes in campaign.points.values()
                                  for n in modes.values())
    assert campaign.kept_before > campaign.kept_after > 0, campaign


@pytest.mark.parametrize("kind", KINDS)
def test_the_campaign_catches_an_operation_split_in_two(kind: str, tmp_path: Path) -> None:
    """The broken build: commit_request commits its request and its output apart, so a fault
    in the second transaction keeps the first."""
    with split_commit_request():
        campaign = run_campaign(cases_of("commit_request"), kind, tmp_path)
    (case,) = campaign.points
    last = campaign.points[case]
    # In between, in every mode: through the port, a fault right after the first commit and
    # one at the second transaction's only write (the output event); below it, each LMDB write
    # of the second transaction (its event, feed entry and tally) and its commit. The faults
    # before and after hold.
    between = {"raise": (2, 1), "exit": (2, 1), "lmdb": (3, 2, 1, 0)}  # back from the last
    assert sorted(campaign.between) == sorted(
        (case, mode, last[mode] - back) for mode in MODES[kind] for back in between[mode]
    ), campaign.failures
    assert all(f.startswith("commit_request:") for f in campaign.failures)
