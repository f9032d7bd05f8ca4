"""Stopping in order: SIGTERM or ``shutdown`` refuse what races them with
``send_message:engine_shutdown``, keep what was acknowledged, and free the data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import Call, RpcFailure
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.engine import Engine
from treemail.core.errors import EngineShutdown
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.protocol import types as t
from treemail.protocol.methods import INITIALIZE, RUN_SUBMIT, SESSION_CREATE, SESSION_LIST, SHUTDOWN


def _accepted(data_dir: Path) -> set[str]:
    store = LmdbStore.open(str(data_dir / "store"))
    try:
        engine = Engine(store, CountingIds())
        return {str(e.data["message_id"]) for _, e in engine.feed()
                if e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED}
    finally:
        store.close()


def test_a_send_racing_shutdown_is_refused_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    daemon = DaemonProcess(tmp_path / "data")

    async def go() -> tuple[list[Any], str]:
        client = await daemon.client()
        root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
        sid = root.session_id
        first = await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="before"))
        # Pipelined in one write: the shutdown is read first, so the sends after it race it.
        answers = await client.pipeline(
            [Call(SHUTDOWN, t.Empty())] + [
                Call(RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text=f"after {i}"))
                for i in range(5)])
        await client.close()
        return answers, first.message_id

    answers, first = run(go())
    code, err = daemon.wait()
    assert code == 0, err
    assert answers[0] == t.ShutdownResult(shutting_down=True)
    raced = answers[1:]
    assert raced and all(isinstance(a, RpcFailure) and a.code == -32010
                         and a.data_code == EngineShutdown.code for a in raced)
    assert _accepted(tmp_path / "data") == {first}
    assert not (tmp_path / "data" / "daemon.sock").exists()


def test_sigterm_stops_in_order_and_frees_the_data_dir(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "data")

    async def traffic() -> list[str]:
        client = await daemon.client()
        root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
        acked = []
        for i in range(5):
            accepted = await client.request(
                RUN_SUBMIT, t.RunSubmitParams(session_id=root.session_id, text=f"m{i}"))
            acked.append(accepted.message_id)
        daemon.proc.send_signal(15)
        # Whatever still reaches it is either accepted or refused with engine_shutdown.
        try:
            while True:
                accepted = await client.request(
                    RUN_SUBMIT, t.RunSubmitParams(session_id=root.session_id, text="x"))
                acked.append(accepted.message_id)
        except RpcFailure as refused:
            assert refused.data_code == EngineShutdown.code, refused
        except ConnectionError:
            pass
        await client.close()
        return acked

    acked = run(traffic())
    code, err = daemon.wait()
    assert code == 0, err
    assert "stopped" in err
    assert set(acked) <= _accepted(tmp_path / "data")
    again = DaemonProcess(tmp_path / "data")  # the lock was released: a new daemon starts
    code, err = again.terminate()
    assert code == 0, err


def test_stdio_serves_one_client_and_stops_when_stdin_closes(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": INITIALIZE.name,
         "params": {"protocol_version": 19, "client_info": {"name": "pipe"}}},
        {"jsonrpc": "2.0", "id": 2, "method": SESSION_LIST.name},
    ]
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "daemon", "--stdio",
         "--data-dir", str(tmp_path / "data")],
        input="".join(json.dumps(f) + "\n" for f in frames), capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, 2]
    assert answers[0]["result"]["protocol_version"] == 19
    assert answers[1]["result"] == {"sessions": [], "next": None}  # one page, the last


def test_sigterm_stops_even_when_nobody_reads_stderr(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "data")
    assert daemon.proc.stderr is not None
    daemon.proc.stderr.close()  # its log lines now meet a broken pipe
    daemon.proc.send_signal(15)
    daemon.proc.wait(timeout=30)
    again = DaemonProcess(tmp_path / "data")  # the first one stopped and dropped its lock
    code, err = again.terminate()
    assert code == 0, err


# A daemon whose SIGTERM arrives the moment its socket accepts clients (right after
# open_daemon bound it), as a supervisor's or a test's can: it must stop in order, never die
# of the signal's default action.
_TERM_ON_OPEN = """
import asyncio, os, signal, sys
from pathlib import Path
from treemail.adapters.daemon import host

opened = host.open_daemon

async def term_on_open(*args, **kwargs):
    daemon = await opened(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.sleep(0.2)  # the signal is taken while the start still goes on
    return daemon

host.open_daemon = term_on_open
sys.exit(asyncio.run(host.run_daemon(Path(sys.argv[1]), None, False)))
"""


def test_a_sigterm_as_soon_as_the_socket_accepts_still_stops_in_order(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _TERM_ON_OPEN, str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "treemail daemon: stopped" in done.stderr
