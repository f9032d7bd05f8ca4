"""The soak's share of ``just test``: 10 SIGKILLs of a worker driving the engine under tight
caps (half its stores committing in groups) and 10 of a real daemon under mixed load. After
every kill nothing acknowledged is lost, nothing is consumed twice, and no cap was ever
passed, replayed from the log; ``tests/deep/test_soak.py`` (``just soak``) runs 500 of each.

Whether a random worker fills an inbox before its kill is chance, so that the caps are
reached, refused beyond, and that the check after a kill catches one passed, is shown by a
run that fills an inbox on purpose (``test_caps_are_reached_refused_beyond_and_checked``)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from tests.crash.daemon_campaign import LIMITS, run_daemon_campaign
from tests.crash.harness import (
    Tally,
    assert_campaign_sound,
    check_store,
    opened,
    run_campaign,
    snapshot,
)
from tests.crash.worker import CAPPED, CHILDREN, ROOT
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.records import ToolContext
from treemail.core.refusals import InboxFull, InflightFull

KILLS = 10


def test_runtime_kills_under_caps_lose_nothing(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREEMAIL_CRASH_CAPS", "1")  # the workers inherit it
    tally = run_campaign(tmp_path, KILLS, per_store=5, drain_every=5, seed=8, mixed=True)
    print(tally.summary())
    assert_campaign_sound(tally, KILLS, claims=False)
    # Every check replayed each inbox and pair against the caps (harness.check_counters).
    assert tally.peak_inbox <= CAPPED.max_pending_per_session, tally.summary()
    assert tally.peak_pair <= CAPPED.max_inflight_per_pair, tally.summary()


def test_caps_are_reached_refused_beyond_and_checked(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's tree under its caps (inbox 6, pair 2): alpha and beta send the lead two
    each, alpha's third is refused for its pair, gamma's two fill the lead's inbox, and
    delta's is refused for it. The check a campaign makes after each kill finds both caps
    reached, and raises on the same store under caps one lower."""
    monkeypatch.setenv("TREEMAIL_CRASH_CAPS", "1")
    store_dir, tally = tmp_path / "store", Tally()
    with opened(store_dir, tally) as engine:
        assert engine.config == CAPPED
        lead = engine.create_root(ROOT)
        children = {spec.name: engine.delegate(lead.session_id, spec, "work") for spec in CHILDREN}
        runs = {name: engine.start_run(child.session_id).run_id
                for name, child in children.items()}
        calls = 0

        def send(name: str) -> None:
            nonlocal calls
            calls += 1
            ctx = ToolContext(children[name].session_id, runs[name], f"call-{calls}")
            engine.send_message(ctx, {"to": lead.reference, "body": f"note {calls}"})

        for name in ("alpha", "alpha", "beta", "beta"):
            send(name)
        with pytest.raises(InflightFull):
            send("alpha")
        for name in ("gamma", "gamma"):
            send(name)
        with pytest.raises(InboxFull):
            send("delta")
        assert len(engine.pending(lead.session_id)) == CAPPED.max_pending_per_session
        assert isinstance(engine.store, LmdbStore)
        shot = snapshot(engine.store)
        check_store(engine, shot, tally)
    assert (tally.peak_inbox, tally.peak_pair) == (6, 2)
    for tighter in (attrs.evolve(CAPPED, max_pending_per_session=5),
                    attrs.evolve(CAPPED, max_inflight_per_pair=1)):
        with opened(store_dir, Tally(), tighter) as engine, \
                pytest.raises(AssertionError, match="cap broken"):
            check_store(engine, shot, Tally())


def test_daemon_kills_lose_nothing(tmp_path: Path) -> None:
    tally = run_daemon_campaign(tmp_path, KILLS, per_store=5, drain_every=5, seed=9)
    print(tally.summary())
    assert_campaign_sound(tally, KILLS, replays=False, claims=False)
    assert tally.peak_pair == LIMITS.max_inflight_per_pair
    assert tally.cut_requests > 0  # kills came with requests in flight
