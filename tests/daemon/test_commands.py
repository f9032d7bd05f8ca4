"""The daemon's subcommands, run in-process against a real daemon subprocess."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.ui.cli import main
from treemail.adapters.ui.commands import steered
from treemail.core.errors import UnknownTarget
from treemail.core.lifecycle import MessageState
from treemail.core.records import RecipientState
from treemail.protocol import types as t
from treemail.protocol.methods import MESSAGE_GET, RUN_SUBMIT, SESSION_CREATE


def _cli(capsys: pytest.CaptureFixture[str], daemon: DaemonProcess, *args: str) -> tuple[
        int, str, str]:
    code = main([*args, "--socket", str(daemon.socket)])
    out, err = capsys.readouterr()
    return code, out, err


class Seeded(NamedTuple):
    session: t.SessionView
    message_id: str  # consumed
    handle: str  # the session's


def _seed(daemon: DaemonProcess) -> Seeded:
    async def go() -> Seeded:
        client = await daemon.client()
        try:
            root = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
            sent = await client.request(
                RUN_SUBMIT, t.RunSubmitParams(session_id=root.session_id, text="hello cli"))
            async with asyncio.timeout(20):
                while (await client.request(MESSAGE_GET, t.MessageGetParams(
                        message_id=sent.message_id))).message.state != MessageState.CONSUMED:
                    await asyncio.sleep(0.02)
            assert root.handle is not None  # every session has one
            return Seeded(root, sent.message_id, root.handle)
        finally:
            await client.close()

    return run(go())


def test_sessions_status_replay_steer_and_approve(
    daemon: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _seed(daemon)
    sid = seeded.session.session_id
    code, out, _ = _cli(capsys, daemon, "sessions")
    assert code == 0 and out.splitlines()[0].split() == [
        "SESSION", "HANDLE", "AGENT", "STATE", "PARENT"]
    assert any(line.startswith(sid) and seeded.handle in line
               for line in out.splitlines())
    code, out, _ = _cli(capsys, daemon, "status", seeded.message_id)
    assert code == 0 and MessageState.CONSUMED in out.splitlines()[0]
    assert out.splitlines()[1].split() == ["SEQ", "STATE", "RUN", "REQUEST"]
    # States as people say them, not the events' class names.
    assert [line.split()[1] for line in out.splitlines()[2:]] == [
        MessageState.ACCEPTED, MessageState.ADMITTED, MessageState.CLAIMED, MessageState.CONSUMED]
    code, out, _ = _cli(capsys, daemon, "replay", sid)
    assert code == 0 and "session created" in out and '"hello cli"' in out
    code, out, _ = _cli(capsys, daemon, "steer", sid, "turn left")
    assert code == 0 and "mode queue" in out and RecipientState.WAKING_FINISHED in out
    assert "a new run starts with it" in out  # what the stable value means, beside it
    code, out, _ = _cli(capsys, daemon, "approve")
    assert code == 0 and "no tool call waits for approval" in out


def test_steer_says_what_every_recipient_state_means() -> None:
    assert set(steered()) == set(RecipientState)


def test_errors_are_one_line_not_a_traceback(
    daemon: DaemonProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = _cli(capsys, daemon, "status", "no-such-message")
    assert code == 1 and UnknownTarget.code in err and "Traceback" not in err
    code, _, err = _cli(capsys, daemon, "send", "--as", "nobody", "x", "y")
    assert code == 1 and UnknownTarget.code in err
    assert main(["sessions", "--socket", str(tmp_path / "none.sock")]) == 1
    assert "no daemon at" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["steer", "--socket", str(daemon.socket)])
    assert usage.value.code == 2
    assert "usage: treemail steer" in capsys.readouterr().err


def test_the_forms_the_rows_print_name_sessions_and_messages(
    daemon: DaemonProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handle and a short id, as tail and replay print them, work where a UUID does."""
    seeded = _seed(daemon)
    sid, handle = seeded.session.session_id, seeded.handle
    short = seeded.message_id[:8]
    code, out, err = _cli(capsys, daemon, "status", short)
    assert code == 0 and out.startswith(f"message {seeded.message_id} to {sid}"), err
    for form in (handle, sid[:8]):
        code, out, err = _cli(capsys, daemon, "replay", form)
        assert code == 0 and '"hello cli"' in out, err
    code, out, err = _cli(capsys, daemon, "steer", handle, "turn right")
    assert code == 0 and "mode queue" in out, err
    # A form too short to be safe, or one naming nothing, is refused without a guess.
    code, _, err = _cli(capsys, daemon, "status", short[:3])
    assert code == 1 and UnknownTarget.code in err and "treemail replay" in err
    code, _, err = _cli(capsys, daemon, "replay", "nobody_00000000")
    assert code == 1 and UnknownTarget.code in err and "treemail sessions" in err

