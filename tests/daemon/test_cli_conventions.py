"""The command line's conventions, as a new user meets them: ``--version``, ``--json`` lines
on every listing and feed, "did you mean", failures that say what happened before their code,
receipts in people's words, ``--data-dir`` everywhere, ``tail -n``, approvals' short ids.
Each runs ``treemail`` in a subprocess, against a real daemon subprocess where it needs one."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any

import pytest

from tests.daemon.conftest import DaemonProcess, quiet, run
from tests.daemon.test_commands import _seed
from treemail.adapters.daemon.lookup import short_approval_id
from treemail.adapters.ui.commands import state_text
from treemail.core.errors import UnknownTarget
from treemail.core.events import EventKind
from treemail.core.lifecycle import ApprovalState, MessageState

# The fields a session's JSON line keeps: scripts rely on them.
# The wire's SessionView, and beside it whether one of the session's calls waits on the user.
SESSION_FIELDS = {"session_id", "root_session_id", "parent_session_id", "handle", "agent",
                  "state", "run_id", "live", "resident", "waiting_on_you"}
EVENT_FIELDS = {"number", "session_id", "seq", "kind", "data"}
LINE_WAIT = 60.0  # seconds a test waits for a line a live command owes it, before failing


def treemail(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "treemail", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def client(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return treemail(*args, "--socket", str(daemon.socket))


def json_lines(text: str) -> list[dict[str, Any]]:
    objects = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(o, dict) for o in objects)
    return objects


class Lines:
    """A live command's output stream, line by line, each waited for at most LINE_WAIT (a
    thread reads it: a pipe's buffered text hides lines from ``select``)."""

    def __init__(self, stream: IO[str] | None) -> None:
        assert stream is not None
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put("")  # the end

    def next(self) -> str:
        try:
            return self.lines.get(timeout=LINE_WAIT)
        except queue.Empty:
            raise AssertionError(f"no line from the command in {LINE_WAIT}s") from None


def test_version_is_the_installed_packages() -> None:
    done = treemail("--version")
    assert done.returncode == 0 and done.stdout == f"treemail {version('treemail')}\n"


def test_a_mistyped_command_is_told_the_close_ones() -> None:
    done = treemail("sesions", "--data-dir", "x")
    assert done.returncode == 2 and "did you mean 'sessions'?" in done.stderr
    done = treemail("aprove")
    assert done.returncode == 2 and "did you mean 'approve'?" in done.stderr
    done = treemail("xyzzy")
    assert done.returncode == 2 and "no command 'xyzzy'" in done.stderr
    assert "did you mean" not in done.stderr and "treemail --help" in done.stderr


def test_listings_and_feeds_speak_json_lines(daemon: DaemonProcess) -> None:
    seeded = _seed(daemon)
    sid, mid = seeded.session.session_id, seeded.message_id
    sessions = json_lines(client(daemon, "sessions", "--json").stdout)
    assert all(set(s) == SESSION_FIELDS for s in sessions)
    assert any(s["session_id"] == sid for s in sessions)
    assert not any(s["waiting_on_you"] for s in sessions)  # no call held
    [receipt] = json_lines(client(daemon, "status", mid[:8], "--json").stdout)
    assert receipt["message"]["message_id"] == mid
    assert [s["state"] for s in receipt["history"]] == [
        MessageState.ACCEPTED, MessageState.ADMITTED, MessageState.CLAIMED, MessageState.CONSUMED]
    replayed = client(daemon, "replay", sid, "--json")
    views = json_lines(replayed.stdout)
    assert replayed.returncode == 0 and views[0]["kind"] == EventKind.SESSION_CREATED
    assert all(set(v) == EVENT_FIELDS and v["session_id"] == sid for v in views)
    assert [v["seq"] for v in views] == list(range(1, len(views) + 1))
    # The store's log, read beside the daemon, gives the very lines the daemon's replay does.
    logged = treemail("log", "--data-dir", str(daemon.data_dir), "--session", sid, "--json")
    assert logged.returncode == 0 and json_lines(logged.stdout) == views
    listed = client(daemon, "approve", "--json")
    assert listed.returncode == 0 and listed.stdout == ""  # no call held: no line


def test_tail_shows_the_last_rows_first_then_follows(daemon: DaemonProcess) -> None:
    sid = _seed(daemon).session.session_id
    _quiet(daemon)  # the seeded run's last events, and earlier tests', are in the feed
    history = json_lines(treemail("log", "--data-dir", str(daemon.data_dir), "--json").stdout)
    tail = subprocess.Popen(
        [sys.executable, "-m", "treemail", "tail", "-n", "3", "--json", "--socket",
         str(daemon.socket)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = Lines(tail.stdout), Lines(tail.stderr)
        shown = [json.loads(out.next()) for _ in range(3)]
        assert "following the feed" in err.next()
        assert shown == history[-3:]
        assert client(daemon, "steer", sid, "and now?").returncode == 0
        after = json.loads(out.next())
        assert after["number"] == history[-1]["number"] + 1 and after["session_id"] == sid
    finally:
        tail.kill()
        tail.communicate()
    rows = client(daemon, "replay", sid).stdout.splitlines()
    assert len(rows) > 3  # a history longer than the 3 rows tail was asked for


def _quiet(daemon: DaemonProcess) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            await quiet(client)
        finally:
            await client.close()

    run(go())


def test_a_failed_command_says_what_happened_then_its_code(daemon: DaemonProcess) -> None:
    done = client(daemon, "send", "--as", "nobody_x", "x", "hello")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("treemail send: no session named 'nobody_x'")
    assert done.stderr.endswith(" [engine:unknown_target]\n")
    assert done.stderr.count("\n") == 1
    done = client(daemon, "send", "--as", "nobody_x", "x", "hello", "--json")
    assert done.returncode == 1 and json.loads(done.stderr) == {
        "command": "send", "code": UnknownTarget.code,
        "error": json.loads(done.stderr)["error"]}
    assert json.loads(done.stderr)["error"].startswith("no session named 'nobody_x'")


def test_a_mistyped_handle_is_told_the_close_one(daemon: DaemonProcess) -> None:
    handle = _seed(daemon).handle
    mistyped = handle[:-1] + ("x" if handle[-1] != "x" else "y")
    done = client(daemon, "replay", mistyped)
    assert done.returncode == 1 and "did you mean " in done.stderr
    assert repr(handle) in done.stderr.split("did you mean ")[1].split("?")[0]


def test_receipt_states_read_as_people_say_them() -> None:
    assert state_text({"kind": EventKind.PRODUCER_MESSAGE_DISCARDED, "reason": "hop limit"}) == (
        "discarded: hop limit")
    assert state_text({"kind": EventKind.PRODUCER_MESSAGE_RELEASED, "reason": None}) == (
        MessageState.RELEASED)


def test_log_and_verify_take_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / ".treemail"
    assert treemail("demo", "--store", f"lmdb:{data / 'store'}").returncode == 0
    by_dir = treemail("log", "--data-dir", str(data))
    assert by_dir.returncode == 0 and "session created" in by_dir.stdout
    assert treemail("log", str(data / "store")).stdout == by_dir.stdout  # still a path
    assert treemail("log", cwd=tmp_path).stdout == by_dir.stdout  # ./.treemail by default
    checked = treemail("verify", "--data-dir", str(data))
    assert checked.returncode == 0 and "no damage found" in checked.stdout
    both = treemail("verify", str(data / "store"), "--data-dir", str(data))
    assert both.returncode == 2 and "one of them" in both.stderr


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[DaemonProcess, str, str]]:
    """A daemon of its own whose demo lead waits on an approval: the daemon, the lead's
    handle and the whole approval id."""
    daemon = DaemonProcess(tmp_path / "data")
    demo = subprocess.Popen(
        [sys.executable, "-m", "treemail", "demo", "--connect", "--socket", str(daemon.socket)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, lead, approval = Lines(demo.stdout), "", ""
        while not approval:
            line = out.next()
            assert line, "the demo ended before asking"
            if found := re.search(r"== (demo_lead_\w+)'s send_message", line):
                lead = found[1]
            if found := re.search(r"run `treemail approve (\S+)`", line):
                approval = found[1]
        yield daemon, lead, approval
    finally:
        demo.kill()
        demo.communicate()
        daemon.terminate()


def test_approvals_go_by_short_ids_of_their_own(held: tuple[DaemonProcess, str, str]) -> None:
    daemon, lead, whole = held
    short = short_approval_id(whole)
    assert short != whole[:8]  # not the session's prefix, which every approval of it shares
    listed = client(daemon, "approve")
    assert listed.stdout.startswith(f"approval {short}  send_message ")
    [line] = json_lines(client(daemon, "approve", "--json").stdout)
    assert line["short_id"] == short and line["approval_id"] == whole
    assert f"approval {short} asked" in client(daemon, "replay", lead).stdout
    # A refused send while the lead's run is in flight: readable, on one line, code last.
    refused = client(daemon, "send", "--as", lead, "nobody_x", "hi")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("treemail send: unknown subagent reference 'nobody_x'")
    assert refused.stderr.endswith(" [subagent:unknown_reference]\n")
    assert "\\x0a" not in refused.stderr and "\\u" not in refused.stderr and "{" not in (
        refused.stderr)
    # A prefix of the whole id that holds its slashes is looked up, not passed on as an id.
    answered = client(daemon, "approve", whole[:-2], "--deny")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith(ApprovalState.DENIED), answered.stdout
    assert client(daemon, "approve", "--json").stdout == ""
    again = client(daemon, "approve", short, "--deny")  # no longer held: named nothing
    assert again.returncode == 1 and again.stderr.endswith("[engine:unknown_target]\n")
