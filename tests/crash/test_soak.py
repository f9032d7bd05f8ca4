"""The soak's share of ``just test``: 10 SIGKILLs of a worker driving the engine under tight
caps (half its stores committing in groups) and 10 of a real daemon under mixed load. After
every kill nothing acknowledged is lost, nothing is consumed twice, and every cap held,
recounted from the log; ``tests/deep/test_soak.py`` (``just soak``) runs 500 of each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.daemon_campaign import LIMITS, run_daemon_campaign
from tests.crash.harness import assert_campaign_sound, run_campaign
from tests.crash.worker import CAPPED

KILLS = 10


def test_runtime_kills_under_caps_lose_nothing(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREEMAIL_CRASH_CAPS", "1")  # the workers inherit it
    tally = run_campaign(tmp_path, KILLS, per_store=5, drain_every=5, seed=8, mixed=True)
    print(tally.summary())
    assert_campaign_sound(tally, KILLS, claims=False)
    # The caps were reached, not merely never approached.
    assert tally.peak_inbox == CAPPED.max_pending_per_session
    assert tally.peak_pair == CAPPED.max_inflight_per_pair


def test_daemon_kills_lose_nothing(tmp_path: Path) -> None:
    tally = run_daemon_campaign(tmp_path, KILLS, per_store=5, drain_every=5, seed=9)
    print(tally.summary())
    assert_campaign_sound(tally, KILLS, replays=False, claims=False)
    assert tally.peak_pair == LIMITS.max_inflight_per_pair
    assert tally.cut_requests > 0  # kills came with requests in flight
