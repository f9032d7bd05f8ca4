"""AC8 for agent mail: a steer and a queued delivery are ProducerMessage* rows owned by the
sending agent, the same rows whether followed live or replayed from the stored store, both as
`treemail log` prints them and as the TUI's transcript pane folds them (one mail row per
message, its lifecycle state updated in place).

User mail, a wake, a release after a crash and a discard are covered through a real daemon in
tests/tui/test_live_equals_replay.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from treemail import AgentSpec, Owner, Rules, ToolContext, open_engine
from treemail.adapters.ui.cli import main
from treemail.adapters.ui.transcript import Transcript, render_event
from treemail.adapters.ui.tui.feed import stored_feed
from treemail.core.engine import Engine
from treemail.core.lifecycle import MessageState


class LiveTail:
    """What a live follower prints: the feed's new rows after each step, named as it goes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.rows: list[str] = []
        self.transcript = Transcript()  # the TUI's transcript pane, fed the same events live
        self.seen = 0

    def poll(self) -> None:
        names = {s.session_id: s.reference for s in self.engine.sessions()}
        for number, event in self.engine.feed(self.seen):
            self.seen = number
            self.transcript.add(event)
            self.rows.append(render_event(event, lambda sid: names.get(sid or "", sid or "?")))


def _scenario(path: Path) -> tuple[LiveTail, str, str]:
    """A lead steers its running child, then queues mail for the child's next run."""
    engine = open_engine(str(path))
    tail = LiveTail(engine)
    lead = engine.create_root(AgentSpec("lead", "plans", Rules.of({"child": "allow"})))
    engine.accept(lead.session_id, "Plan the work.", Owner.USER)
    lead_run = engine.start_run(lead.session_id)
    child = engine.delegate(lead.session_id, AgentSpec("worker", "works"), "Do it.")
    child_run = engine.start_run(child.session_id)
    tail.poll()

    def send(call: str, body: str, mode: str) -> str:
        ctx = ToolContext(lead.session_id, lead_run.run_id, call)
        sent = engine.send_message(ctx, {"to": child.handle, "body": body, "mode": mode})
        tail.poll()
        return sent.message_id

    steered = send("call-1", "Look at tokenizer.py first.", "steer")
    queued = send("call-2", "Afterwards, write the summary.", "queue")
    request = engine.begin_request(child.session_id, child_run.run_id)
    engine.commit_request(child.session_id, child_run.run_id, request.request_id)
    engine.finish_run(child.session_id, child_run.run_id, "tokenizer mapped")
    tail.poll()
    next_run = engine.start_run(child.session_id)
    request = engine.begin_request(child.session_id, next_run.run_id)
    engine.commit_request(child.session_id, next_run.run_id, request.request_id)
    tail.poll()
    engine.store.close()
    return tail, steered, queued


def _verbs(rows: list[str], message_id: str) -> list[str]:
    """The lifecycle verbs of the rows that name one message by its short id, in order."""
    found = (re.search(r"#\d+\s+(\w+)\s+message " + message_id[:8], row) for row in rows)
    return [match.group(1) for match in found if match]


def test_steer_and_queue_are_the_same_mail_rows_live_and_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    tail, steered, queued = _scenario(store)
    live = tail.rows
    accepted = [row for row in live if " accepted " in row]
    assert len(accepted) >= 2
    steer_row = next(row for row in accepted if "tokenizer.py" in row)
    queue_row = next(row for row in accepted if "summary" in row)
    # Both modes read as agent mail from the lead, differing only in the mode they carry.
    for row, mode in ((steer_row, "steer"), (queue_row, "queue")):
        assert re.search(rf"agent mail from lead_[0-9a-f]{{8}} \(mode={mode}, hop=1\)", row), row
    for message_id in (steered, queued):
        assert _verbs(live, message_id) == [
            MessageState.ADMITTED, MessageState.CLAIMED, MessageState.CONSUMED], live
    # The steer joined the running run; the queued mail waited for the next one.
    assert any(steered[:8] in row and "into the running run" in row for row in live)
    assert any(queued[:8] in row and "into the next run" in row for row in live)

    # Replayed from the store after the process let go of it: the very same rows.
    assert main(["log", str(store)]) == 0
    replay = capsys.readouterr().out.splitlines()
    assert replay == live


def test_the_tuis_mail_rows_for_steer_and_queue_are_the_same_live_and_replayed(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    tail, steered, queued = _scenario(store)
    live = tail.transcript
    replay = Transcript()
    replay.extend(event for _, event in stored_feed(store))
    assert live.rows() == replay.rows()
    for message_id, mode in ((steered, "steer"), (queued, "queue")):
        row = live.row(f"mail:{message_id}")
        assert row is not None and row.state == MessageState.CONSUMED
        shown = rf"consumed +agent mail from lead_[0-9a-f]{{8}} \(mode={mode}"
        assert re.match(shown, row.text), row
