"""The long SIGKILL campaign: ``TREEMAIL_KILLS`` kills (default 200), run by ``just deep``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.harness import assert_campaign_sound, env_kills, run_campaign


@pytest.mark.deep
def test_long_sigkill_campaign(tmp_path: Path) -> None:
    kills = env_kills(200)
    tally = run_campaign(tmp_path, kills, per_store=25, drain_every=5, seed=19700101)
    print(tally.summary())
    assert_campaign_sound(tally, kills)
