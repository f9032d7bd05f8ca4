"""SIGKILL a worker process driving the engine on a durable LMDB store, again and again.

After each kill: every acknowledged send is stored, no record is half-written, and (every few
kills, and at the end) recovery plus a full drain consumes each message exactly once. The
campaign itself lives in ``tests.crash.harness``; ``tests/deep`` runs it ten times longer.
"""

from __future__ import annotations

from pathlib import Path

from tests.crash.harness import assert_campaign_sound, run_campaign

KILLS = 40


def test_sigkill_campaign_loses_nothing_and_delivers_once(tmp_path: Path) -> None:
    tally = run_campaign(tmp_path, KILLS, per_store=10, drain_every=5, seed=20240611)
    print(tally.summary())
    assert_campaign_sound(tally, KILLS)
