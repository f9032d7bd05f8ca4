"""``treemail verify``'s exact report: what a user reads for each kind of damage (the table and
key each problem is filed under, and the closing verdict), a record filed under another
record's key, and a store that keeps no bytes to check."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import World
from tests.unit.test_verify import contents, made, run_verify, tamper
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.verify import main as verify_main
from treemail.core import keys
from treemail.core.keys import Table, Tally
from treemail.core.records import Approval


def _moved(rows: dict[Table, dict[bytes, Any]], table: Table) -> tuple[bytes, bytes, object]:
    """A copy of one of ``table``'s records under a key that is not its own: (the wrong key,
    the record's own key, the record)."""
    if table is Table.APPROVALS:  # the sample store holds none: one made here
        approval = Approval("a-1", "s", "r", "call-1", "echo", {}, "echo")
        return keys.identity("a-2"), keys.identity("a-1"), approval
    right, record = sorted(rows[table].items())[0]
    wrong = (keys.event(record.session_id, 999) if table is Table.EVENTS
             else keys.identity("00000099-0000-4000-8000-000000000000"))
    return wrong, right, record


@pytest.mark.parametrize("table", [Table.SESSIONS, Table.RUNS, Table.MESSAGES,
                                   Table.APPROVALS, Table.EVENTS])
def test_a_record_under_another_key_is_named_by_its_table_and_both_keys(
        tmp_path: Path, table: Table) -> None:
    directory = made(tmp_path / "s")
    wrong, right, record = _moved(contents(directory), table)
    tamper(directory, table, wrong, record)
    code, text = run_verify(directory)
    assert code == 1, text
    assert f"damaged: {table} {wrong!r}: holds a record that belongs at {right!r}\n" in text


def test_each_counter_problem_is_filed_under_the_table_that_keeps_the_counter(
        tmp_path: Path) -> None:
    # An inbox counter lives in its recipient's tally row, the sessions counter in the
    # counters table: the report names the one a user would inspect or repair.
    directory = made(tmp_path / "s")
    rows = contents(directory)
    owner, tally = next((k, t) for k, t in sorted(rows[Table.TALLY].items())
                        if "inbox" in t.counters)
    tamper(directory, Table.TALLY, owner,
           Tally(tally.last_event, {**tally.counters, "inbox": tally.counters["inbox"] + 5}))
    tamper(directory, Table.COUNTERS, b"sessions", 1)
    code, text = run_verify(directory)
    assert code == 1, text
    inbox = keys.tallied_name(owner, "inbox").encode()
    assert (f"damaged: tally {inbox!r}: holds {tally.counters['inbox'] + 5}, the pending "
            f"messages count {tally.counters['inbox']}\n") in text
    assert "damaged: counters b'sessions': holds 1, below the 3 already handed out\n" in text


def test_the_verdict_line_counts_records_tables_and_problems(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    records = sum(len(rows) for rows in contents(directory).values())
    code, text = run_verify(directory)
    assert (code, text) == (0, f"treemail verify: {records} records in {len(Table)} tables "
                               "checked; no damage found\n")
    tamper(directory, Table.COUNTERS, b"sessions", None)  # one problem
    code, text = run_verify(directory)
    assert code == 1
    assert text.splitlines()[-1] == (f"treemail verify: {records - 1} records in {len(Table)} "
                                     "tables checked; 1 problem(s)")


def test_a_store_without_stored_bytes_is_refused_on_the_error_stream() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert verify_main("memory:", out, err) == 2
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "treemail verify: the store 'memory:' keeps no stored bytes to check (memory: holds "
        "records as they are); verify a directory or a postgresql:// store\n")


def test_runs_and_mail_of_a_session_that_is_not_stored_are_each_named(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    rows = contents(directory)
    runs = rows[Table.RUNS]
    session_id = sorted(runs.values(), key=lambda run: run.run_id)[0].session_id
    own_runs = sorted(key for key, run in runs.items() if run.session_id == session_id)
    mail = sorted(key for key, m in rows[Table.MESSAGES].items() if m.recipient == session_id)
    assert own_runs and mail
    tamper(directory, Table.SESSIONS, keys.identity(session_id), None)
    code, text = run_verify(directory)
    assert code == 1, text
    for key in own_runs:
        assert f"damaged: runs {key!r}: belongs to session {session_id}, not stored\n" in text
    for key in mail:
        assert f"damaged: messages {key!r}: is for session {session_id}, not stored\n" in text


def test_a_replay_answer_whose_message_is_gone_is_named_by_its_key(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    key, result = sorted(contents(directory)[Table.REPLAY].items())[0]
    tamper(directory, Table.MESSAGES, keys.identity(result.message_id), None)
    code, text = run_verify(directory)
    assert code == 1, text
    assert (f"damaged: replay {key!r}: answers with message {result.message_id}, "
            "not stored\n") in text


def test_each_index_difference_names_the_index_its_key_and_both_sides(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    rows = contents(directory)
    missing, message_id = sorted(rows[Table.PENDING].items())[0]
    tree_key, tree_session = sorted(rows[Table.TREE].items())[0]
    handle, owner = sorted(rows[Table.HANDLES].items())[0]
    invented = keys.pending(owner, 999)
    tamper(directory, Table.PENDING, missing, None)
    tamper(directory, Table.PENDING, invented, "m")
    tamper(directory, Table.TREE, tree_key, None)
    tamper(directory, Table.HANDLES, handle, "other")
    code, text = run_verify(directory)
    assert code == 1, text
    assert f"damaged: pending {missing!r}: index entry {message_id!r} is missing\n" in text
    assert f"damaged: pending {invented!r}: index entry 'm' has no record behind it\n" in text
    assert f"damaged: tree {tree_key!r}: index entry {tree_session!r} is missing\n" in text
    assert (f"damaged: handles {handle!r}: index says 'other', the records say "
            f"{owner!r}\n") in text


def test_a_reverted_session_keeps_no_handle_and_the_store_verifies(tmp_path: Path) -> None:
    # A reverted session (a ghost) gives up its handle: the handles index holds only the live
    # sessions', and verify expects exactly that.
    directory = made(tmp_path / "s")
    sessions = contents(directory)[Table.SESSIONS]
    child = next(s for s in sessions.values() if s.parent_session_id is not None)
    store = LmdbStore.open(directory, sync=False)
    World(store).engine.revert(child.session_id)
    store.close()
    rows = contents(directory)
    assert not rows[Table.SESSIONS][keys.identity(child.session_id)].live
    assert child.session_id not in rows[Table.HANDLES].values()
    assert run_verify(directory)[0] == 0


def test_a_gap_in_a_session_log_names_the_session(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    rows = contents(directory)
    event = rows[Table.EVENTS][rows[Table.FEED][keys.feed(2)]]
    tamper(directory, Table.EVENTS, keys.event(event.session_id, event.seq), None)
    code, text = run_verify(directory)
    assert code == 1, text
    assert f"damaged: events {keys.events_of(event.session_id)!r}: the log has gaps\n" in text


def test_a_tally_behind_its_log_names_the_tally_row_and_both_seqs(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    owner, tally = next((k, t) for k, t in sorted(contents(directory)[Table.TALLY].items())
                        if t.last_event > 1)
    tamper(directory, Table.TALLY, owner, Tally(1, tally.counters))
    code, text = run_verify(directory)
    assert code == 1, text
    assert (f"damaged: tally {owner!r}: index says 1, the records say {tally.last_event}\n"
            in text)


def test_a_feed_gap_names_the_first_row_past_it_and_the_rest_is_still_checked(
        tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    rows = contents(directory)
    unlisted = rows[Table.FEED][keys.feed(3)]
    tamper(directory, Table.FEED, keys.feed(3), None)
    code, text = run_verify(directory)
    assert code == 1, text
    problems = [line for line in text.splitlines() if line.startswith("damaged: ")]
    assert problems == [f"damaged: feed {keys.feed(4)!r}: the feed skips from 2",
                        f"damaged: events {unlisted!r}: the event is not in the feed"]


def test_feed_damage_is_filed_under_a_row_the_named_table_holds(tmp_path: Path) -> None:
    # The feed row that lists a missing event is named by its own key (the row to repair),
    # and an event listed twice by the event's key, under events: verify once filed both
    # under "feed" with the event's key, a key no feed row has.
    directory = made(tmp_path / "s")
    rows = contents(directory)
    gone, twice = rows[Table.FEED][keys.feed(2)], rows[Table.FEED][keys.feed(5)]
    last = max(rows[Table.FEED])
    tamper(directory, Table.EVENTS, gone, None)
    tamper(directory, Table.FEED, keys.feed(keys.feed_number(last) + 1), twice)
    code, text = run_verify(directory)
    assert code == 1, text
    assert (f"damaged: feed {keys.feed(2)!r}: the feed lists the event {gone!r}, which is "
            "not stored\n") in text
    assert f"damaged: events {twice!r}: the feed lists the event 2 times\n" in text


def _tally_with(rows: dict[Table, dict[bytes, Any]], has_inbox: bool) -> tuple[bytes, Tally]:
    return next((k, t) for k, t in sorted(rows[Table.TALLY].items())
                if ("inbox" in t.counters) is has_inbox)


def test_a_guard_counter_missing_or_kept_without_mail_is_named_with_both_counts(
        tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    rows = contents(directory)
    dropped, with_inbox = _tally_with(rows, True)
    invented, without = _tally_with(rows, False)
    tamper(directory, Table.TALLY, dropped, Tally(
        with_inbox.last_event, {s: n for s, n in with_inbox.counters.items() if s != "inbox"}))
    tamper(directory, Table.TALLY, invented,
           Tally(without.last_event, {**without.counters, "inbox": 3}))
    code, text = run_verify(directory)
    assert code == 1, text
    assert (f"damaged: tally {keys.tallied_name(dropped, 'inbox').encode()!r}: holds 0, the "
            f"pending messages count {with_inbox.counters['inbox']}\n") in text
    assert (f"damaged: tally {keys.tallied_name(invented, 'inbox').encode()!r}: holds 3, the "
            "pending messages count 0\n") in text


def test_a_numbering_counter_dropped_after_handing_out_1_is_named(tmp_path: Path) -> None:
    # Its session has had exactly one run: the counter must hold at least 1, so a store
    # without it would number the next run 1 again.
    directory = made(tmp_path / "s")
    runs = [run for run in contents(directory)[Table.RUNS].values()]
    once = next(run.session_id for run in runs
                if [r.session_id for r in runs].count(run.session_id) == 1)
    name = keys.runs_counter(once).encode()
    tamper(directory, Table.COUNTERS, name, None)
    code, text = run_verify(directory)
    assert code == 1, text
    assert f"damaged: counters {name!r}: holds 0, below the 1 already handed out\n" in text


def test_a_counter_kept_at_0_is_named(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    tamper(directory, Table.COUNTERS, b"grant/session/s/send/x", 0)
    code, text = run_verify(directory)
    assert code == 1, text
    problems = [line for line in text.splitlines() if line.startswith("damaged: ")]
    assert problems == ["damaged: counters b'grant/session/s/send/x': a counter at 0 is "
                        "never kept"]


def test_a_counter_name_that_is_not_text_is_checked_not_a_crash(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    tamper(directory, Table.COUNTERS, b"grant/\xff\xfe", 0)
    code, text = run_verify(directory)
    assert code == 1, text
    # (named with the undecodable bytes replaced: such a name can only come from a writer's
    # bug, as the checksum covers every key)
    assert text.count("a counter at 0 is never kept") == 1, text


def test_a_new_empty_store_verifies(tmp_path: Path) -> None:
    # No session yet: the sessions counter has handed out nothing and is not kept.
    LmdbStore.open(tmp_path / "s", sync=False).close()
    assert run_verify(tmp_path / "s") == (
        0, "treemail verify: 0 records in 12 tables checked; no damage found\n")


def test_a_damaged_record_is_named_by_the_database_it_is_in(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    key, raw = sorted(_raw(directory, Table.RUNS).items())[0]
    store = LmdbStore.open(directory, sync=False)
    store.write_raw(Table.RUNS, key, raw[:-1] + bytes([raw[-1] ^ 1]))
    store.close()
    code, text = run_verify(directory)
    assert code == 1, text
    assert (f"damaged: runs {key!r}: checksum mismatch in database 'runs' at key {key!r}: "
            "the record is damaged; restore the store from a copy (treemail verify lists "
            "every damaged record)\n") in text


def _raw(directory: Path, table: Table) -> dict[bytes, bytes]:
    store = LmdbStore.open(directory, readonly=True)
    try:
        with store.raw_rows() as rows:
            return dict(rows(table))
    finally:
        store.close()


@pytest.mark.parametrize(("kept", "said"), [
    (1, "holds 1, the pending messages count 0"),
    (0, "a counter at 0 is never kept"),
])
def test_a_guard_counter_kept_without_mail_is_one_problem(tmp_path: Path, kept: int,
                                                          said: str) -> None:
    directory = made(tmp_path / "s")
    owner, tally = _tally_with(contents(directory), False)
    tamper(directory, Table.TALLY, owner, Tally(tally.last_event, {**tally.counters,
                                                                    "inbox": kept}))
    code, text = run_verify(directory)
    assert code == 1, text
    problems = [line for line in text.splitlines() if line.startswith("damaged: ")]
    assert problems == [f"damaged: tally {keys.tallied_name(owner, 'inbox').encode()!r}: {said}"]
