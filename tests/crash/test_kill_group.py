"""The SIGKILL campaign with group commit on: the worker runs its steps in batches (one write
transaction each, a savepoint per operation) and acks a batch's sends only after its commit.
Kills land inside batches; every acked send must survive, nothing half-written may remain,
and recovery plus a drain must consume each message exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.harness import assert_campaign_sound, run_campaign

KILLS = 20


def test_sigkill_inside_group_commits_loses_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREEMAIL_CRASH_GROUP", "1")  # the workers inherit it
    tally = run_campaign(tmp_path, KILLS, per_store=10, drain_every=5, seed=20261202)
    print(tally.summary())
    assert_campaign_sound(tally, KILLS, claims=False)
