"""AC8: live equals replay. A scenario runs through a real daemon while a client records its
live subscription; the rows folded from that recording (the TUI's transcript) and the rows
printed per event (the CLI's) are then compared with the rows of the same store replayed
read-only after the daemon is gone. The scenario covers a steer and a queued delivery, a
wake, a release after a crash (the daemon SIGKILLed with mail claimed) and a discard with
its reason.

The discard is an operator's decision taken on the store while the daemon is down (the
protocol has no discard method); the restarted daemon's subscription delivers it like any
other event, since the feed is durable.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonProcess
from tests.tui.conftest import Recorder, mail, reaped, slow_daemon
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.ui.cli import main
from treemail.adapters.ui.transcript import Transcript, render_event
from treemail.adapters.ui.tui.feed import LiveFeed, stored_feed
from treemail.core import events
from treemail.core.lifecycle import MessageState, RunState, SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_READ, SESSION_CREATE, SESSION_GET


async def _first_part(daemon: DaemonProcess, rec: Recorder) -> dict[str, Any]:
    """Steer, queue and a wake; then mail claimed and a steer admitted when the daemon dies."""
    client = await daemon.client()
    await rec.follow(LiveFeed(client))
    lead = (await client.request(SESSION_CREATE, t.SessionCreateParams(agent="lead"))).session_id

    woke = (await client.submit(lead, "Plan the work.")).message_id
    await rec.until(mail(events.ProducerMessageClaimed, woke))
    steered = (await client.steer(lead, "Look at the tokenizer first.")).message_id
    queued = (await client.submit(lead, "Afterwards, write the summary.")).message_id
    await rec.until(mail(events.ProducerMessageConsumed, queued))
    crashed = (await client.submit(lead, "Take your time.")).message_id
    await rec.until(mail(events.ProducerMessageClaimed, crashed))
    dropped = (await client.steer(lead, "Never mind the details.")).message_id
    await rec.until(mail(events.ProducerMessageAdmitted, dropped))
    await rec.stop()
    daemon.kill()
    await client.close()
    return {"lead": lead, "steered": steered, "queued": queued, "crashed": crashed,
            "dropped": dropped}


def _discard_offline(store: Path, message_id: str) -> None:
    from treemail.adapters.runtime.ids import UuidIds
    from treemail.adapters.store.lmdb_store import LmdbStore
    from treemail.core.engine import Engine

    opened = LmdbStore.open(str(store))
    try:
        Engine(opened, UuidIds()).discard(message_id, "withdrawn by the operator")
    finally:
        opened.close()


async def _after_restart(daemon: DaemonProcess, rec: Recorder, ids: dict[str, Any]) -> None:
    client: DaemonClient = await daemon.client()
    await rec.follow(LiveFeed(client), after=rec.last)
    await rec.until(mail(events.ProducerMessageReleased, ids["crashed"]))
    consumed = await rec.until(mail(events.ProducerMessageConsumed, ids["crashed"]))
    # The run that read it ends (its session finished or idle); then the feed is still.
    await rec.until(lambda p: isinstance(p, events.RunFinished | events.RunInterrupted),
                    after=consumed, session_id=ids["lead"], what="the lead's run ending")
    state = (await client.request(SESSION_GET, t.SessionGetParams(session_id=ids["lead"]))).state
    assert state in (SessionState.FINISHED, SessionState.IDLE), state
    head = (await client.request(EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
    await rec.until(lambda _: rec.last >= head)
    await rec.stop()
    await client.close()


def test_the_rows_of_a_live_scenario_are_the_rows_of_its_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder()
    with reaped(slow_daemon(tmp_path, delay=0.8)) as first:
        ids = asyncio.run(_first_part(first, rec))
    _discard_offline(tmp_path / "store", ids["dropped"])
    with reaped(slow_daemon(tmp_path, delay=0.8)) as restarted:
        asyncio.run(_after_restart(restarted, rec, ids))
        code, err = restarted.terminate()
    assert code == 0, err

    live = Transcript()
    live_lines = []
    for _, event in rec.got:  # as the TUI folds them, and as `treemail tail` prints them
        live.add(event)
        live_lines.append(render_event(event, live.name))
    replayed = stored_feed(tmp_path / "store")
    # Across the crash, the subscriptions gave every stored event once, in order.
    assert [n for n, _ in rec.got] == [n for n, _ in replayed]
    replay = Transcript()
    replay.extend(event for _, event in replayed)
    assert live.rows() == replay.rows()
    assert main(["log", str(tmp_path / "store")]) == 0
    assert capsys.readouterr().out.splitlines() == live_lines

    by_key = {row.key: row for row in live.rows()}

    def shown(message: str) -> str:
        return by_key[f"mail:{ids[message]}"].text

    assert shown("steered").startswith("consumed  user mail (mode=steer)")
    assert shown("queued").startswith("consumed  user mail (mode=queue)")
    assert shown("dropped") == ("discarded user mail (mode=steer): \"Never mind the details.\" "
                                "— withdrawn by the operator")
    assert shown("crashed").startswith("consumed ")
    steps = [line for line in live_lines if ids["crashed"][:8] in line]
    assert [line.split()[2] for line in steps] == [
        MessageState.ADMITTED, MessageState.CLAIMED, MessageState.RELEASED, MessageState.CLAIMED,
        MessageState.CONSUMED]
    texts = [row.text for row in live.rows()]
    assert "run 1 queued (wake)" in texts
    assert any(t.startswith("run ") and RunState.INTERRUPTED in t for t in texts)
