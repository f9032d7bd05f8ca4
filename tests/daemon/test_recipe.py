"""The README's three-terminal recipe, run as written from a fresh directory: the daemon,
``tail``, and ``demo --connect``, whose held call is answered with the ``treemail approve ID``
it prints, as the README says; tail must show the demo tree's conversation live."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.unit.test_readme_daemon import section

STEP = 60  # seconds any one step of the recipe may take


def recipe() -> list[list[str]]:
    """The commands of the section's ``sh`` block, in terminal order, after ``treemail``."""
    [block] = re.findall(r"```sh\n(.*?)```", section(), flags=re.DOTALL)
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    commands = [shlex.split(line) for line in lines if line]
    assert all(words[0].endswith("/treemail") for words in commands), commands
    return [words[1:] for words in commands]


def _interruptible() -> None:
    """Ctrl-C as a terminal delivers it: a process started in the background of a shell
    without job control (``nohup``, ``cmd &`` in a script, some CI runners) inherits SIGINT
    ignored, and so would tail, which then never stops on it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(cwd: Path, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "treemail", *args], cwd=cwd, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_interruptible)


def _wait_for(path: Path) -> None:
    import socket

    deadline = time.monotonic() + STEP
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as probe:
            if path.exists() and probe.connect_ex(str(path)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing serves {path}")


def _answer_as_told(cwd: Path, demo: subprocess.Popen[str]) -> str:
    """Read the demo's lines up to the ``treemail approve ID`` it asks for, and run that (the
    demo waits on it); what it printed so far."""
    assert demo.stdout is not None
    lines = []
    for line in demo.stdout:
        lines.append(line)
        if told := re.search(r"run `(treemail approve \S+)`", line):
            answer = subprocess.run([sys.executable, "-m", *shlex.split(told[1])], cwd=cwd,
                                    capture_output=True, text=True, timeout=STEP)
            assert answer.returncode == 0 and "approved (scope once)" in answer.stdout, answer
            return "".join(lines)
    raise AssertionError(f"the demo asked for no approval:\n{''.join(lines)}")


def _rows(printed: str) -> list[str]:
    """The conversation's rows among what the demo printed."""
    return [line for line in printed.splitlines() if re.match(r"  \S+ +#\d+ ", line)]


def _read_until(tail: subprocess.Popen[str], wanted: set[str] | None) -> list[str]:
    """tail's lines until every one of ``wanted`` is among them (None: until tail's output
    ends): the feed reaches tail after the demo printed its rows, however busy the machine.
    tail is killed after STEP seconds, so a row that never comes fails the test's assertion
    instead of hanging it. (Read through one file object: its buffer keeps what a second
    reader of the pipe would lose.)"""
    assert tail.stdout is not None
    watchdog = threading.Timer(STEP, tail.kill)
    watchdog.start()
    seen: list[str] = []
    try:
        for line in tail.stdout:
            seen.append(line.rstrip("\n"))
            if wanted is not None and wanted <= set(seen):
                break
    finally:
        watchdog.cancel()
    return seen


def test_the_three_terminal_recipe_shows_the_conversation_live(tmp_path: Path) -> None:
    daemon_args, tail_args, demo_args = recipe()
    assert (daemon_args[0], tail_args[0], demo_args[0]) == ("daemon", "tail", "demo")
    daemon = _start(tmp_path, daemon_args)  # terminal 1
    tail = demo = None
    try:
        _wait_for(tmp_path / ".treemail" / "daemon.sock")  # the default data directory
        tail = _start(tmp_path, tail_args)  # terminal 2
        assert tail.stderr is not None
        assert "following the feed" in tail.stderr.readline()  # subscribed: now it is live
        demo = _start(tmp_path, demo_args)  # terminal 3
        printed = _answer_as_told(tmp_path, demo)
        out, err = demo.communicate(timeout=STEP * 2)
        printed += out
        assert demo.returncode == 0, err
        assert "4 sessions" in printed and "each exactly once" in printed
        seen = _read_until(tail, set(_rows(printed)))  # the last rows reach tail
        missing = set(_rows(printed)) - set(seen)
        assert not missing, f"tail showed no {sorted(missing)} within {STEP}s"
        tail.send_signal(signal.SIGINT)
        seen += _read_until(tail, None)  # the rest, to the end: tail stops on SIGINT
        tail.wait(timeout=STEP)
    finally:
        for client in (tail, demo):
            if client is not None and client.poll() is None:
                client.kill()
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=STEP)
    assert daemon.returncode == 0, err
    assert tail.returncode == 0, f"tail did not stop on SIGINT within {STEP}s (killed)"
    rows = seen
    demo_rows = _rows(printed)
    assert demo_rows and set(demo_rows) <= set(rows)  # tail showed every row the demo did
    _assert_a_conversation(rows)


def _assert_a_conversation(rows: list[str]) -> None:
    def some(pattern: str) -> list[str]:
        return [row for row in rows if re.search(pattern, row)]

    created = some(r"session created")
    assert len(created) == 4 and len(some(r"session created \(child of")) == 3
    # The lead's model delegates two children, one of them delegates the fourth.
    assert len(some(r"demo_lead_\w+ .*calls delegate_subagent\(agent=demo_explore")) == 1
    assert some(r"demo_tester_\w+ .*calls delegate_subagent\(agent=demo_review")
    # The lead steers explore (steer mode), explore answers it (queue mode).
    assert some(r"demo_explore_\w+ .*agent mail from demo_lead_\w+ \(mode=steer, hop=1\)")
    assert some(r"demo_lead_\w+ .*agent mail from demo_explore_\w+ \(mode=queue, hop=2\): "
                r'"Re: ')
    # Every child's result goes back to its parent, who reads it.
    assert len(some(r"delegation result sent to the parent")) >= 3
    assert some(r'demo_lead_\w+ .*model says ".*demo_explore_\w+ reported')
    assert some(r"user mail \(mode=steer\)")
