"""The command line: the demo's own check, the scenario it plays (read back from the store it
leaves behind), its determinism, and log replay of that store."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.ui.cli import main
from treemail.core import events as log
from treemail.core.engine import Engine
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import ApprovalState
from treemail.core.records import Event, RecipientState

ROW = re.compile(r"^  \S+\s+#\d+ ")  # a transcript row: session, its event number, the event


def _demo(store: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["demo", "--path", str(store)]) == 0
    return capsys.readouterr().out


def _feed(store: Path) -> tuple[list[Event], dict[str, str | None]]:
    """The kept store's events, and each session's parent."""
    opened = LmdbStore.open(store)
    try:
        engine = Engine(opened, CountingIds())
        parents = {s.session_id: s.parent_session_id for s in engine.sessions()}
        return [event for _, event in engine.feed()], parents
    finally:
        opened.close()


def _send_results(events: list[Event]) -> list[tuple[object, object]]:
    """(mode, recipient_state) of every send_message result, approved sends included."""
    payloads = [log.read(e) for e in events]
    contents = [r.content for p in payloads if isinstance(p, log.ToolResults) for r in p.results]
    results = [json.loads(content) for content in contents]
    results += [p.outcome.as_result() for p in payloads if isinstance(p, log.ApprovalAnswered)]
    return [(r["mode"], r["recipient_state"]) for r in results if "message_id" in r]


def test_demo_delivers_every_message_exactly_once_and_the_log_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    demo = _demo(store, capsys)
    assert "each exactly once" in demo and "MISMATCH" not in demo
    headings = [line for line in demo.splitlines() if line.startswith("== ")]
    for scene in ("steers", "Siblings", "wakes", "Crash", "recovery", "Check"):
        assert any(scene in heading for heading in headings), scene
    assert main(["log", str(store)]) == 0
    replay = capsys.readouterr().out.splitlines()
    # The live transcript showed every stored event, across the crash, in feed order.
    live = [line for line in demo.splitlines() if ROW.match(line)]
    assert live == replay and len(live) > 100


def test_the_demo_plays_its_scenario_into_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    _demo(store, capsys)
    events, parents = _feed(store)
    kinds = Counter(event.kind for event in events)
    # One send went through the approval flow, answered once by "the user".
    assert kinds[EventKind.APPROVAL_REQUESTED] == kinds[EventKind.APPROVAL_ANSWERED] == 1
    [answered] = [e for e in events if e.kind == EventKind.APPROVAL_ANSWERED]
    assert (answered.data["state"], answered.data["scope"]) == (ApprovalState.APPROVED, "once")
    # Steer into a running child, queue for a queued one, and a finished child woken.
    sends = _send_results(events)
    for expected in (("steer", RecipientState.RUNNING), ("queue", RecipientState.QUEUED),
                     ("queue", RecipientState.WAKING_FINISHED)):
        assert expected in sends, expected
    assert sends.count(("queue", RecipientState.WAKING_FINISHED)) == 1
    # Each child's delegation completed exactly once: the woken child reported nothing more.
    children = {sid for sid, parent in parents.items() if parent is not None}
    completed = Counter(e.session_id for e in events if e.kind == EventKind.DELEGATION_COMPLETED)
    assert len(children) == 3 and completed == dict.fromkeys(children, 1)
    # A child's result: delegation mail from the child to its parent (rendered as a
    # <subagent_result> only when the parent's model reads it).
    notices = [e for e in events if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
               and e.data["owner"] == "delegation" and e.data["sender"] in children
               and parents[str(e.data["sender"])] == e.session_id]
    assert len(notices) == 3
    woken = [sid for sid in children
             if sum(e.kind == EventKind.RUN_FINISHED for e in events if e.session_id == sid) == 2]
    assert len(woken) == 1
    # The crash: runs found dead at restart, claimed mail released, then consumed once.
    crashed = [e for e in events
               if e.kind == EventKind.RUN_INTERRUPTED
               and e.data["reason"] == "crash found at restart"]
    assert len(crashed) == 3
    released = {e.data["message_id"] for e in events
                if e.kind == EventKind.PRODUCER_MESSAGE_RELEASED}
    consumed = Counter(e.data["message_id"] for e in events
                       if e.kind == EventKind.PRODUCER_MESSAGE_CONSUMED)
    assert released and all(consumed[m] == 1 for m in released)


def test_the_demo_prints_the_same_transcript_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _demo(tmp_path / "one", capsys)
    assert _demo(tmp_path / "two", capsys) == first


def test_log_of_a_missing_store_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["log", str(tmp_path / "nothing")]) == 2
    assert "no store at" in capsys.readouterr().err


# -- bad command lines get a usage error, never a traceback ---------------------------------


def test_demo_into_a_used_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "data.mdb").write_bytes(b"")
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--path", str(tmp_path / "store")])
    assert caught.value.code == 2
    assert "is not empty" in capsys.readouterr().err


def test_demo_into_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--path", str(tmp_path / "file")])
    assert caught.value.code == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("interval", ["-1", "0", "nan", "inf", "soon"])
def test_log_refuses_a_bad_interval(
    interval: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["log", str(tmp_path), "--follow", "--interval", interval])
    assert caught.value.code == 2
    assert "--interval" in capsys.readouterr().err


def test_log_of_an_unknown_session_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    _demo(store, capsys)
    assert main(["log", str(store), "--session", "bogus"]) == 2
    captured = capsys.readouterr()
    assert "no session 'bogus'" in captured.err and captured.out == ""
    events, parents = _feed(store)
    root = next(sid for sid, parent in parents.items() if parent is None)
    assert main(["log", str(store), "--session", root]) == 0
    assert len(capsys.readouterr().out.splitlines()) == sum(e.session_id == root for e in events)


def test_a_reader_that_goes_away_ends_the_log_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`treemail log STORE | head`: the pipe closes under the log; no traceback, status 141."""
    import os
    import subprocess
    import sys

    store = tmp_path / "store"
    _demo(store, capsys)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first row: every write meets EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "treemail", "log", str(store)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == "", done.stderr
