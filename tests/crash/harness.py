"""The kill campaign shared by the fast crash test and the long one in ``tests/deep``.

A campaign spawns ``tests.crash.worker`` on a durable LMDB store, waits until it says it is
ready, lets it write a random 10-150 lines to its ack file (acked sends and answered
replays), SIGKILLs it, and then, with no worker alive, checks the store from this process:

* every message_id the worker acked (its send had returned success) is stored, and its
  tool context still replays to it;
* nothing is half-written: each session's event log is numbered 1..n with its tally's last seq n,
  each stored message has its ProducerMessageAccepted event and its latest lifecycle event
  names its current state, the pending index holds exactly the pending messages, and the
  inbox and pair counters equal a recount of pending agent mail made from the event logs;
* every cap held, at every point of the store's history, not only at the kill: each inbox
  and pair, replayed from its recipient's event log, stayed within ``max_pending_per_session``
  and ``max_inflight_per_pair``, and no message was consumed more than once;
* every few kills, and after the last kill of a store: ``recover()``, then every session is
  drained (queued runs started, requests committed until nothing is claimed, runs finished),
  after which each stored message was consumed exactly once and nothing is pending.

The store is reused across kills, so state (and the worker's replay history) accumulates;
the campaign moves to a fresh store every ``per_store`` kills to keep each check short. With
``mixed``, every other store's workers commit in groups (``TREEMAIL_CRASH_GROUP``), so kills
land inside group-commit batches too. ``assert_campaign_sound`` is what every campaign test
asserts of its tally. ``tests.crash.daemon_campaign`` runs the same checks on a daemon's
store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.crash.worker import complete_lines, config, parse_context
from treemail.adapters.store.codec import decode
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.ui.console import Ticker
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.keys import Counter as CounterKind
from treemail.core.keys import Table, counter_kind, inbox_counter, pair_counter, tallied_name
from treemail.core.keys import Tally as StoredTally
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.records import Event, IdempotencyKey, Message, Owner, Session
from treemail.core.transitions import message_event

__all__ = ["Tally", "assert_campaign_sound", "check_store", "drain_and_verify", "opened",
           "run_campaign"]

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
# How much a worker does before its kill, in lines it appended to its ack file: progress, not
# wall time, so a loaded machine slows the campaign down instead of thinning every run out
# (a clock-timed kill at load 15 found workers that had not got far enough to fill an inbox).
# About 30-300 ms of an unloaded worker.
LINES_BEFORE_KILL = (10, 150)
PROGRESS_TIMEOUT = 300.0  # a worker that writes no line for this long is stuck, not slow
ACCEPTED = message_event(MessageState.ACCEPTED)
CONSUMED = message_event(MessageState.CONSUMED)


@dataclass
class Tally:
    """What a campaign did, so a test can show it was not vacuous."""

    kills: int = 0
    killed_mid_run: int = 0
    killed_with_claims: int = 0
    drains: int = 0
    stale_readers: int = 0
    seconds: float = 0.0
    # The fullest any inbox and pair ever were, replayed from the event logs.
    peak_inbox: int = 0
    peak_pair: int = 0
    cut_requests: int = 0  # requests a daemon kill left unanswered (the daemon campaign)
    drain_every: int = 1  # a recovery and a drain every so many kills, and at each store's end
    # Per store directory: what its last check found.
    acks: dict[str, int] = field(default_factory=dict)
    replays: dict[str, int] = field(default_factory=dict)
    consumed: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        return (f"{self.kills} kills in {self.seconds:.1f}s: {sum(self.acks.values())} acked "
                f"sends, {sum(self.replays.values())} replays, {self.killed_mid_run} kills "
                f"mid-run, {self.killed_with_claims} with mail claimed, {self.drains} drains "
                f"consuming {sum(self.consumed.values())} messages, "
                f"{self.stale_readers} stale readers, fullest inbox {self.peak_inbox}, "
                f"fullest pair {self.peak_pair}")


@dataclass
class Snapshot:
    """Every record of a store, read from its tables directly, not through the port."""

    sessions: dict[str, Session]
    messages: dict[str, Message]
    logs: dict[str, list[Event]]
    last_seq: dict[str, int]
    pending_index: set[tuple[str, int, str]]
    counters: dict[str, int]


def assert_campaign_sound(tally: Tally, kills: int, *, replays: bool = True,
                          claims: bool = True) -> None:
    """What every campaign must show besides its per-kill checks (which raise at once): all
    kills done, no reader slot left behind, and that it was not vacuous: sends got through
    (``replays``: some were retried), kills hit runs in the middle of work (``claims``: with
    mail claimed), and the drains ran."""
    assert tally.kills == kills, tally.summary()
    assert tally.stale_readers == 0, tally.summary()
    assert sum(tally.acks.values()) >= kills, tally.summary()
    assert not replays or sum(tally.replays.values()) > 0, tally.summary()
    assert tally.killed_mid_run >= kills // 2, tally.summary()
    assert not claims or tally.killed_with_claims > 0, tally.summary()
    assert tally.drains >= kills // tally.drain_every, tally.summary()


def run_campaign(base: Path, kills: int, *, per_store: int, drain_every: int,
                 seed: int, mixed: bool = False) -> Tally:
    rng = random.Random(seed)
    tally = Tally(drain_every=drain_every)
    started = time.monotonic()
    tick = Ticker(kills, "SIGKILLs")  # on the controlling terminal only: pytest captures
    for kill in range(kills):
        store_dir = base / f"store{kill // per_store}"
        acks = store_dir.with_suffix(".acks")
        ready = base / f"ready{kill}"
        group = mixed and (kill // per_store) % 2 == 1
        kill_worker(store_dir, seed * 1_000_000 + kill, acks, ready,
                    rng.randint(*LINES_BEFORE_KILL), group=group)
        tally.kills += 1
        last_of_store = (kill + 1) % per_store == 0 or kill + 1 == kills
        with opened(store_dir, tally) as engine:
            verify(engine, acks, tally)
            if last_of_store or (kill + 1) % drain_every == 0:
                drain_and_verify(engine, tally)
        tick(f"store {kill // per_store}")
    tick.close()
    tally.seconds = time.monotonic() - started
    return tally


def kill_worker(store_dir: Path, seed: int, acks: Path, ready: Path, lines: int, *,
                group: bool = False) -> None:
    """Run a worker until it has appended ``lines`` lines to ``acks``, then SIGKILL it. The
    kill lands wherever the worker is by the time this process sees the last of them: an
    unfinished line, a send, a group commit."""
    errors = ready.with_suffix(".stderr")
    # Whole lines only: the worker cuts a trailing fragment off before it says it is ready.
    start = acks.read_bytes().rfind(b"\n") + 1 if acks.exists() else 0
    command = [sys.executable, "-m", "tests.crash.worker", str(store_dir), str(seed),
               str(acks), str(ready)]
    env = dict(os.environ, TREEMAIL_CRASH_GROUP="1") if group else None
    with errors.open("wb") as stderr:
        worker = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
                                  env=env)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready.exists():
            assert worker.poll() is None, f"worker died before ready: {errors.read_text()}"
            assert time.monotonic() < deadline, "worker not ready in time"
            time.sleep(0.005)
        wait_for_lines(worker, acks, start, lines, errors)
        assert worker.poll() is None, f"worker exited on its own: {errors.read_text()}"
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.kill()
        worker.wait()
    assert worker.returncode == -signal.SIGKILL, worker.returncode


def wait_for_lines(worker: subprocess.Popen[bytes], acks: Path, start: int, lines: int,
                   errors: Path) -> None:
    deadline = time.monotonic() + PROGRESS_TIMEOUT
    with acks.open("rb") as file:
        seen = 0
        file.seek(start)
        while seen < lines:
            seen += file.read().count(b"\n")
            if seen >= lines:
                return
            assert worker.poll() is None, f"worker exited on its own: {errors.read_text()}"
            assert time.monotonic() < deadline, f"worker wrote {seen} of {lines} lines in time"
            time.sleep(0.002)


@contextmanager
def opened(store_dir: Path, tally: Tally,
           limits: MessagingConfig | None = None) -> Iterator[Engine]:
    """The store of ``store_dir`` in this process, while no worker runs."""
    store = LmdbStore.open(store_dir, sync=True)
    try:
        # A killed worker's reader slot must not survive; LMDB clears the lock table when
        # the first process opens the environment, so nothing stale should be found.
        tally.stale_readers += store._env.reader_check()
        yield Engine(store, CountingIds(namespace=0xC0FFEE), limits or config())
    finally:
        store.close()


# -- reading the tables ---------------------------------------------------------------------


def rows(store: LmdbStore, db: Table, kind: type[Any]) -> Iterator[tuple[bytes, Any]]:
    with store.raw_rows() as raw_rows:
        for key, raw in raw_rows(db):
            yield key, decode(kind, raw, db=db, key=key)


def snapshot(store: LmdbStore) -> Snapshot:
    logs: dict[str, list[Event]] = defaultdict(list)
    for _, event in rows(store, Table.EVENTS, Event):
        logs[event.session_id].append(event)
    pending_index = set()
    for key, message_id in rows(store, Table.PENDING, str):
        recipient, seq = key[:-9].decode(), int.from_bytes(key[-8:], "big")
        pending_index.add((recipient, seq, message_id))
    tallies = list(rows(store, Table.TALLY, StoredTally))
    return Snapshot(
        sessions={s.session_id: s for _, s in rows(store, Table.SESSIONS, Session)},
        messages={m.message_id: m for _, m in rows(store, Table.MESSAGES, Message)},
        logs=dict(logs),
        last_seq={key.decode(): t.last_event for key, t in tallies},
        pending_index=pending_index,
        counters={**{key.decode(): n for key, n in rows(store, Table.COUNTERS, int)},
                  **{tallied_name(key, slot): n for key, t in tallies
                     for slot, n in t.counters.items()}},
    )


def read_ack_file(path: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Acked context -> message_id, and the (message_id, context) of every replay."""
    acked: dict[str, str] = {}
    replays = []
    for line in complete_lines(path):
        fields = line.split("\t")
        if fields[0] == "replay":
            replays.append((fields[1], fields[2]))
        else:
            message_id, context = fields
            acked[context] = message_id
    return acked, replays


# -- the checks -----------------------------------------------------------------------------


def verify(engine: Engine, acks: Path, tally: Tally) -> Snapshot:
    assert isinstance(engine.store, LmdbStore)
    shot = snapshot(engine.store)
    check_acks(engine, acks, tally)
    check_store(engine, shot, tally)
    return shot


def check_store(engine: Engine, shot: Snapshot, tally: Tally) -> None:
    """Everything a kill must leave whole, whoever was killed."""
    check_logs(shot)
    check_messages(engine, shot)
    check_counters(shot, engine.config, tally)
    check_runs(engine, shot, tally)
    twice = {mid: n for mid, n in consumed(shot).items() if n > 1}
    assert not twice, f"consumed more than once: {twice}"


def consumed(shot: Snapshot) -> Counter[str]:
    counts: Counter[str] = Counter()
    for log in shot.logs.values():
        counts.update(str(e.data["message_id"]) for e in log if e.kind == CONSUMED)
    return counts


def check_acks(engine: Engine, acks: Path, tally: Tally) -> None:
    acked, replays = read_ack_file(acks)
    with engine.store.read() as tx:
        for context, message_id in acked.items():
            assert tx.message(message_id) is not None, f"acked {message_id} is not stored"
            recalled = tx.recall(IdempotencyKey.of(parse_context(context)))
            assert recalled is not None, f"acked call {context} is not in the replay index"
            assert recalled.message_id == message_id, f"{context} now replays to another id"
    for message_id, context in replays:
        assert acked.get(context) == message_id, f"replay of {context} gave {message_id}"
    tally.acks[str(acks)], tally.replays[str(acks)] = len(acked), len(replays)


def check_logs(shot: Snapshot) -> None:
    assert set(shot.logs) == set(shot.sessions), "events of unknown sessions, or none"
    for session_id, log in shot.logs.items():
        assert [e.seq for e in log] == list(range(1, len(log) + 1)), f"gap in {session_id}"
        assert shot.last_seq.get(session_id) == len(log), f"last_seq of {session_id} is off"
        assert log[0].kind == EventKind.SESSION_CREATED, (
            f"{session_id} log starts with {log[0].kind}")


def message_kinds(shot: Snapshot) -> dict[str, list[str]]:
    """Each message's lifecycle events, in its recipient's log order."""
    kinds: dict[str, list[str]] = defaultdict(list)
    for log in shot.logs.values():
        for event in log:
            if event.kind.startswith("ProducerMessage"):
                kinds[str(event.data["message_id"])].append(event.kind)
    return kinds


def check_messages(engine: Engine, shot: Snapshot) -> None:
    kinds = message_kinds(shot)
    assert set(kinds) == set(shot.messages), "events of unstored messages, or messages unlogged"
    for message_id, message in shot.messages.items():
        assert message.recipient in shot.sessions, f"{message_id} has no recipient"
        assert kinds[message_id][0] == ACCEPTED, f"{message_id} lacks its accepted event"
        assert kinds[message_id].count(ACCEPTED) == 1, f"{message_id} accepted twice"
        assert kinds[message_id][-1] == message_event(message.state), (
            f"{message_id} is {message.state} but its log says {kinds[message_id][-1]}")
    pending = {(m.recipient, m.seq, m.message_id) for m in shot.messages.values() if m.pending}
    assert shot.pending_index == pending, "the pending index and the messages disagree"
    for session_id in shot.sessions:
        listed = {m.message_id for m in engine.pending(session_id)}
        assert listed == {mid for r, _, mid in pending if r == session_id}, session_id


# Keyed by the kind as the log spells it (a str).
_STATE_OF: dict[str, MessageState] = {message_event(state): state for state in MessageState}


def check_counters(shot: Snapshot, limits: MessagingConfig, tally: Tally) -> None:
    """The guard counters against a recount of pending agent mail, each message's state
    taken from its last lifecycle event in the log (not from the message record), and every
    level each inbox and pair ever had (``levels``) against the caps."""
    kinds = message_kinds(shot)
    recount: Counter[str] = Counter()
    for m in shot.messages.values():
        if _STATE_OF[kinds[m.message_id][-1]].pending and m.owner is Owner.AGENT \
                and m.sender is not None:
            recount[inbox_counter(m.recipient)] += 1
            recount[pair_counter(m.sender, m.recipient)] += 1
    stored = {name: n for name, n in shot.counters.items()
              if counter_kind(name) in (CounterKind.INBOX, CounterKind.PAIR)}
    assert stored == dict(recount), f"guard counters {stored} != recount {dict(recount)}"
    peaks, final = levels(shot)
    # The replay ends where the recount stands, or its peaks would mean nothing (a level
    # below zero kept: it would be a message that ended without being accepted).
    ended = {name: n for name, n in final.items() if n}
    assert ended == dict(recount), f"the replayed levels {ended} != recount {dict(recount)}"
    inboxes = [n for name, n in peaks.items() if counter_kind(name) is CounterKind.INBOX]
    pairs = [n for name, n in peaks.items() if counter_kind(name) is CounterKind.PAIR]
    tally.peak_inbox = max([tally.peak_inbox, *inboxes])
    tally.peak_pair = max([tally.peak_pair, *pairs])
    assert max(inboxes, default=0) <= limits.max_pending_per_session, f"inbox cap broken: {peaks}"
    assert limits.max_inflight_per_pair <= 0 or max(pairs, default=0) <= \
        limits.max_inflight_per_pair, f"pair cap broken: {peaks}"


def levels(shot: Snapshot) -> tuple[Counter[str], Counter[str]]:
    """The highest count of pending agent mail each inbox and pair ever held, replayed from
    the event logs: a message counts from its accepted event until its consumed or discarded
    one. Every one of them is in its recipient's log, in the order the guards saw them, so
    the replay finds a cap broken between two kills, which a count at the kill would not.
    Returns the peaks and the levels the logs end with."""
    peaks: Counter[str] = Counter()
    level: Counter[str] = Counter()
    for session_id, log in shot.logs.items():
        for event in log:
            state = _STATE_OF.get(event.kind)
            if state is None or (state is not MessageState.ACCEPTED and state.pending):
                continue
            m = shot.messages[str(event.data["message_id"])]
            assert m.recipient == session_id, f"{m.message_id} logged by {session_id}"
            if m.owner is not Owner.AGENT or m.sender is None:
                continue
            step = 1 if state is MessageState.ACCEPTED else -1
            for name in inbox_counter(m.recipient), pair_counter(m.sender, m.recipient):
                level[name] += step
                peaks[name] = max(peaks[name], level[name])
    return peaks, level


def check_runs(engine: Engine, shot: Snapshot, tally: Tally) -> None:
    for session in shot.sessions.values():
        if session.run_id is None:
            assert session.state in (SessionState.IDLE, SessionState.FINISHED), session
            continue
        run = engine.run(session.run_id)
        assert run.session_id == session.session_id, run
        assert run.status.value == session.state, (session.state, run.status)
    tally.killed_mid_run += any(s.state == SessionState.RUNNING for s in shot.sessions.values())
    tally.killed_with_claims += any(m.state == MessageState.CLAIMED for m in shot.messages.values())


def drain_and_verify(engine: Engine, tally: Tally) -> None:
    assert isinstance(engine.store, LmdbStore)
    engine.recover()
    drain(engine)
    shot = snapshot(engine.store)
    check_store(engine, shot, tally)
    counts = consumed(shot)
    assert set(counts) == set(shot.messages), "a message was never consumed, or a ghost was"
    assert not shot.pending_index, "mail left pending after the drain"
    tally.drains += 1
    tally.consumed[engine.store._path] = sum(counts.values())


def drain(engine: Engine) -> None:
    """Run every session until no run is queued: each run claims and commits all its mail."""
    for _ in range(100):
        queued = [s for s in engine.sessions() if s.state == SessionState.QUEUED]
        if not queued:
            return
        for session in queued:
            sid = session.session_id
            run = engine.start_run(sid)
            while True:
                request = engine.begin_request(sid, run.run_id)
                engine.commit_request(sid, run.run_id, request.request_id)
                if not request.deliveries:
                    break
            engine.finish_run(sid, run.run_id)
    raise AssertionError("the drain did not settle in 100 rounds")


def env_kills(default: int) -> int:
    return int(os.environ.get("TREEMAIL_KILLS", default))
