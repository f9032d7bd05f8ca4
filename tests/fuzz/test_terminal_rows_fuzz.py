"""Transcript rows from hostile text: every event a log can hold, made by a real engine from
fuzzed bodies, tasks, descriptions, model output, tool arguments and results and reasons,
and stored entries with arbitrary data, become rows (``event_row``, the TUI's
``Transcript``, the CLI's coloured line) without a crash and with no control character a
terminal would obey: each is shown escaped (``terminal.visible``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.daemon.test_terminal_rows import RAW
from tests.fuzz.conftest import TALLY
from tests.fuzz.strategies import JSON, TEXT
from tests.unit.conftest import agent
from treemail.adapters.ui.styles import styled_line
from treemail.adapters.ui.transcript import Transcript, event_row, render_log
from treemail.core import events
from treemail.core.engine import Engine
from treemail.core.errors import TreemailError
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import SessionState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import Event, Owner

CONTROLS = st.text(st.sampled_from("\x1b\x07\r\n\x08\x00\x7f\x9b\x85\u202e\u2066\u2028]52;[2K"),
                   min_size=1, max_size=12)
HOSTILE = st.one_of(TEXT, CONTROLS, st.builds("".join, st.lists(st.one_of(TEXT, CONTROLS),
                                                               max_size=4)))


def _tried(outcome: Counter[str], what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        result = fn(*args, **kwargs)
    except TreemailError as refused:
        outcome[f"{what} refused {refused.code}"] += 1
        return None
    outcome[f"{what} stored"] += 1
    return result


def _log(texts: list[str]) -> list[Event]:
    """A root and a child whose log holds the drawn texts wherever the engine keeps text."""
    body, task, description, output, argument, result, reason = texts
    engine = Engine(MemoryStore(), CountingIds())
    tally = TALLY["terminal rows"]
    root = engine.create_root(agent("root", {"*": "allow"}))
    for owner in (Owner.USER, Owner.PLUGIN):
        _tried(tally, "mail", engine.accept, root.session_id, body, owner)
    _tried(tally, "delegation", engine.delegate, root.session_id, agent("kid"), task,
           description=description)
    run = engine.start_run(root.session_id) if engine.session(
        root.session_id).state == SessionState.QUEUED else None
    if run is not None:
        request = engine.begin_request(root.session_id, run.run_id)
        call = events.RecordedCall("c1", "send_message", json.dumps({"to": "x", "body": argument}))
        _tried(tally, "output", engine.commit_request, root.session_id, run.run_id,
               request.request_id, events.Reply((body,), output, (call,)))
        _tried(tally, "results", engine.record_tool_results, root.session_id, run.run_id,
               [events.RecordedResult("c1", result)])
        _tried(tally, "cancel", engine.cancel_run, root.session_id, run.run_id, reason)
    return [e for _, e in engine.feed()]


def _assert_inert(log: list[Event]) -> None:
    names = {e.session_id: e.session_id for e in log}
    for event in log:
        row = event_row(event, lambda sid: names.get(sid or "", sid or "?"))
        for text in (row.line(), styled_line(row).plain):
            assert RAW.search(text) is None and "\n" not in text, repr(text)
    folded = Transcript()
    folded.extend(log)
    for line in folded.lines():
        assert RAW.search(line) is None and "\n" not in line, repr(line)


@given(texts=st.lists(HOSTILE, min_size=7, max_size=7))
def test_rows_from_hostile_text_in_every_field(texts: list[str]) -> None:
    log = _log(texts)
    _assert_inert(log)
    assert render_log(log, []) and all(RAW.search(line) is None for line in render_log(log, []))


@given(session_id=HOSTILE, kind=st.sampled_from([k.value for k in events.EventKind]),
       data=st.dictionaries(st.sampled_from(("body", "reason", "text", "description",
                                             "sender", "message_id", "owner", "mode",
                                             "run_id", "tool", "label")), JSON, max_size=6))
def test_rows_from_stored_entries_with_arbitrary_data(session_id: str, kind: str,
                                                      data: dict[str, Any]) -> None:
    _assert_inert([Event(session_id, 1, kind, data)])
    TALLY["terminal rows"]["stored entries"] += 1
