"""Agents registered over the wire, against a real daemon: registrations of one name race
safely, the user's own ``agents/`` file always wins a name, and a registration that cannot
be written is refused with a typed answer and leaves nothing behind."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from tests.daemon.test_registered import _said, _settled
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.errors import AgentDefinedByFile
from treemail.adapters.daemon.registered import REGISTERED_DIR
from treemail.core.errors import AgentDocError, StoreFull
from treemail.core.events import EventKind
from treemail.protocol import types as t
from treemail.protocol.methods import RUN_SUBMIT, SESSION_CREATE, SESSION_LIST

HELPER = """---
name: aide
description: Delegated by the lead
permissions:
  message:
    parent: allow
---
You help.
"""


def _lead(rule: str) -> str:
    return textwrap.dedent(f"""\
        ---
        name: lead
        description: Delegates, then steers its aide
        permissions:
          message:
            "{rule.split(':')[0]}": {rule.split(':')[1].strip()}
        ---
        You lead.
        delegate aide: Check the parser.
        steer aide: Look at the tokenizer first.
        """)


ALLOW, DENY = _lead("child: allow"), _lead("*: deny")


def _racer(i: int) -> str:
    return f"---\nname: racer\ndescription: variant {i}\n---\nYou race, variant {i}.\n"


def _kept(data: Path) -> list[str]:
    where = data / REGISTERED_DIR
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


def test_concurrent_registrations_of_one_name_all_succeed(tmp_path: Path) -> None:
    data, connections, each = tmp_path / "data", 8, 32  # 256 registrations of "racer"

    async def one(client: DaemonClient, i: int) -> t.SessionView | str:
        try:
            view = await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=_racer(i)))
            return view
        except RpcFailure as failure:
            return str(failure.data_code)

    async def race() -> list[t.SessionView | str]:
        clients = [await daemon.client() for _ in range(connections)]
        try:
            return list(await asyncio.gather(*(
                one(client, c * each + i)
                for c, client in enumerate(clients) for i in range(each))))
        finally:
            for client in clients:
                await client.close()

    daemon = DaemonProcess(data)
    try:
        answers = run(race())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    failed = [a for a in answers if isinstance(a, str)]
    assert failed == [], failed  # not one rpc:internal (nor any other refusal)
    assert _kept(data) == ["racer.md"]  # no temporary file left
    assert (data / REGISTERED_DIR / "racer.md").read_text() in {
        _racer(i) for i in range(connections * each)}  # one whole doc, never a torn one

    async def again() -> str:
        client = await restarted.client()
        try:
            view = await client.request(SESSION_CREATE, t.SessionCreateParams(agent="racer"))
            return view.agent
        finally:
            await client.close()

    restarted = DaemonProcess(data)  # it starts on what the race left
    try:
        assert run(again()) == "racer"
    finally:
        code, err = restarted.terminate()
    assert code == 0, err


async def _lead_run(client: DaemonClient, params: t.SessionCreateParams) -> list[str]:
    """Create a lead's tree, give it a task, and return what the lead said."""
    lead = await client.request(SESSION_CREATE, params)
    await client.request(RUN_SUBMIT, t.RunSubmitParams(session_id=lead.session_id, text="go"))
    await _settled(client)
    return await _said(client, lead.session_id)


def _steered(said: list[str]) -> bool:
    return any(line.startswith(EventKind.MODEL_OUTPUT) and "message sent" in line
               for line in said)


def test_the_users_agents_file_wins_over_a_registration(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def registered() -> list[str]:
        client = await daemon.client()
        try:
            return await _lead_run(client, t.SessionCreateParams(
                agent_doc=ALLOW, agent_docs=[HELPER]))
        finally:
            await client.close()

    daemon = DaemonProcess(data)
    try:
        said = run(registered())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert _steered(said), said  # child: allow lets the lead steer its aide
    assert _kept(data) == ["aide.md", "lead.md"]

    # The user now writes their own lead, denying every message, and restarts.
    (data / "agents").mkdir()
    (data / "agents" / "lead.md").write_text(DENY)

    async def revoked() -> tuple[list[str], RpcFailure, t.SessionView]:
        client = await daemon.client()
        try:
            said = await _lead_run(client, t.SessionCreateParams(agent="lead"))
            with pytest.raises(RpcFailure) as refused:  # the wire cannot grant it back
                await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=ALLOW))
            same = await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=DENY))
            return said, refused.value, same
        finally:
            await client.close()

    daemon = DaemonProcess(data)
    try:
        said, refused, same = run(revoked())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert not _steered(said), said  # the file's "*": deny governs: send_message is gone
    assert any("delegated aide_" in line for line in said), said  # it did reach the steer
    assert refused.data_code == AgentDefinedByFile.code, refused
    assert str(data / "agents" / "lead.md") in str(refused)
    assert same.agent == "lead"  # the file's own definition is not a conflict
    assert str(data / "agents" / "lead.md") in err  # said at start, both paths named
    assert str(data / REGISTERED_DIR / "lead.md") in err


def test_a_name_too_long_for_the_file_system_is_refused_and_keeps_nothing(
        tmp_path: Path) -> None:
    long_name = "a" * 300
    doc = f"---\nname: {long_name}\ndescription: too long to be a file name\n---\nHi.\n"

    async def go() -> tuple[RpcFailure, list[t.SessionView]]:
        client = await daemon.client()
        try:
            with pytest.raises(RpcFailure) as refused:
                await client.request(
                    SESSION_CREATE, t.SessionCreateParams(agent_doc=doc, agent_docs=[HELPER]))
            await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent_doc=HELPER))  # still works
            return refused.value, (await client.request(
                SESSION_LIST, t.SessionListParams())).sessions
        finally:
            await client.close()

    daemon = DaemonProcess(tmp_path / "data")
    try:
        refused, sessions = run(go())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert refused.data_code == AgentDocError.code, refused
    assert "shorter name" in str(refused)
    assert [s.agent for s in sessions] == ["aide"]  # the refused create made none
    assert _kept(tmp_path / "data") == ["aide.md"]  # and wrote nothing, not even its aide


# Loaded by the daemon at start (sitecustomize, from PYTHONPATH): the disk fills up while
# a doc holding the marker is written, after part of it went to its file.
FULL_DISK = """
import errno, os
from treemail.adapters.daemon import registered

_real = registered._write_all

def _write_all(fd, data):
    if b"fills the disk" in data:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    _real(fd, data)

registered._write_all = _write_all
"""


def test_a_full_disk_while_registering_is_refused_and_keeps_nothing(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(FULL_DISK)
    filler = "---\nname: filler\ndescription: x\n---\nThis doc fills the disk.\n"

    async def go() -> tuple[RpcFailure, list[t.SessionView]]:
        client = await daemon.client()
        try:
            with pytest.raises(RpcFailure) as refused:  # its aide is written first
                await client.request(
                    SESSION_CREATE, t.SessionCreateParams(agent_doc=filler, agent_docs=[HELPER]))
            return refused.value, (await client.request(
                SESSION_LIST, t.SessionListParams())).sessions
        finally:
            await client.close()

    daemon = DaemonProcess(tmp_path / "data", env={"PYTHONPATH": str(hooks)})
    try:
        refused, sessions = run(go())
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    assert refused.data_code == StoreFull.code, refused
    assert "free space and retry" in str(refused)
    assert sessions == []
    assert _kept(tmp_path / "data") == []  # no temporary file, and no aide.md either
