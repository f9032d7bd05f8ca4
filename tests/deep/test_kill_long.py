"""The long SIGKILL campaign: ``TREEMAIL_KILLS`` kills (default 200), run by ``just deep``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.harness import env_kills, run_campaign


@pytest.mark.deep
def test_long_sigkill_campaign(tmp_path: Path) -> None:
    kills = env_kills(200)
    tally = run_campaign(tmp_path, kills, per_store=25, drain_every=5, seed=19700101)
    print(tally.summary())
    assert tally.kills == kills
    assert tally.stale_readers == 0
    assert sum(tally.acks.values()) >= kills
    assert sum(tally.replays.values()) > 0
    assert tally.killed_mid_run >= kills // 2
    assert tally.killed_with_claims > 0
