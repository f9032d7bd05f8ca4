"""Outside text never drives the operator's terminal, through a real daemon: a user turn and
a plugin body holding a title change, a clipboard write (OSC 52), a row erase, BEL, CR, an
8-bit CSI and a bidi override are shown by ``treemail tail``, ``replay`` and ``status`` with
every control character escaped, never sent raw (the scripted agent's reply, which quotes
the text, too)."""

from __future__ import annotations

import asyncio
import queue
import re
import subprocess
import sys
import threading
from typing import IO, Any

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.test_scenario import LEAD
from treemail.core.lifecycle import MessageState, SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import PLUGIN_PRODUCER_SEND, RUN_SUBMIT, SESSION_CREATE, SESSION_GET

STEP = 60  # seconds any one step may take, however loaded the machine
HOSTILE = ("clip\x1b]52;c;cm0=\x07 \u202eevil \x9b2J \x1b[2K\x1b[1A \x07 \rX \x1b]0;t\x07"
           "\u2028next")
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SHOWN = "clip\\x1b]52;c;cm0=\\x07"  # how the clipboard write must read


def _treemail(daemon: DaemonProcess, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "treemail", argv[0], "--data-dir",
                           str(daemon.data_dir), *argv[1:]],
                          capture_output=True, text=True, timeout=STEP)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


async def _mail(daemon: DaemonProcess) -> dict[str, Any]:
    client = await daemon.client()
    try:
        root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=LEAD))
        sid = root.session_id
        user = await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text=HOSTILE))
        plugin = await client.request(
            PLUGIN_PRODUCER_SEND, t.ProducerSendParams(session_id=sid, body=HOSTILE))
        async with asyncio.timeout(STEP):
            while (await client.request(
                SESSION_GET, t.SessionGetParams(session_id=sid))).state not in (
                    SessionState.IDLE, SessionState.FINISHED):
                await asyncio.sleep(0.05)
        return {"session": sid, "user": user.message_id, "plugin": plugin.message_id}
    finally:
        await client.close()


def test_tail_replay_and_status_show_control_characters_escaped(daemon: DaemonProcess) -> None:
    tail = subprocess.Popen([sys.executable, "-m", "treemail", "tail", "--data-dir",
                             str(daemon.data_dir)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    followed: queue.Queue[str] = queue.Queue()
    try:
        assert tail.stderr is not None and tail.stdout is not None
        assert "following the feed" in tail.stderr.readline()
        threading.Thread(target=_lines, args=(tail.stdout, followed), daemon=True).start()
        sent = run(_mail(daemon), timeout=STEP * 2)
        seen: list[str] = []
        while not any("clip" in line and "plugin mail" in line for line in seen):
            seen.append(followed.get(timeout=STEP))  # queue.Empty here: the row never came
    finally:
        tail.kill()
        tail.wait(timeout=STEP)
    replayed = _treemail(daemon, "replay", sent["session"])
    statuses = [_treemail(daemon, "status", sent[m]) for m in ("user", "plugin")]
    for out in ("".join(seen), replayed, *statuses):
        assert RAW.search(out) is None, repr(RAW.findall(out))
    for shown in (SHOWN, "\\u202eevil", "\\x9b2J", "\\x1b[2K\\x1b[1A \\x07"):
        assert shown in replayed, shown
    assert sum(SHOWN in line for line in replayed.splitlines()) >= 3  # user, plugin, reply
    assert all(MessageState.CONSUMED in status for status in statuses)
