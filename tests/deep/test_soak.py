"""``just soak``: ``TREEMAIL_KILLS`` (default 500) SIGKILLs of a worker driving the engine
under tight caps, half its stores committing in groups, and as many of a real daemon under
mixed load; the checks after every kill are those of ``tests/crash/test_soak.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.daemon_campaign import run_daemon_campaign
from tests.crash.harness import assert_campaign_sound, env_kills, run_campaign


@pytest.mark.deep
def test_soak_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREEMAIL_CRASH_CAPS", "1")  # the workers inherit it
    kills = env_kills(500)
    tally = run_campaign(tmp_path, kills, per_store=25, drain_every=5, seed=5000, mixed=True)
    print(f"soak runtime: {tally.summary()}")
    assert_campaign_sound(tally, kills)


@pytest.mark.deep
def test_soak_daemon(tmp_path: Path) -> None:
    kills = env_kills(500)
    tally = run_daemon_campaign(tmp_path, kills, per_store=25, drain_every=5, seed=5001)
    print(f"soak daemon: {tally.summary()}, {tally.cut_requests} requests cut by a kill")
    assert_campaign_sound(tally, kills, replays=False)
    assert tally.cut_requests > 0
