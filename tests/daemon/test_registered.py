"""Agents defined over the wire (``session.create``'s ``agent_doc`` and ``agent_docs``) are
known to the daemon after a restart on the same data directory: its sessions, a delegated
child's included, run again. (They failed with ``KeyError: no agent ...`` before the docs
were kept in ``DATA_DIR/registered-agents``.) A refused create keeps nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.daemon.registered import REGISTERED_DIR
from treemail.core.errors import AgentDocError, InvalidRequest
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_READ, RUN_SUBMIT, SESSION_CREATE, SESSION_LIST

PLANNER = """---
name: wire_planner
description: Defined only on the wire
permissions:
  message:
    child: allow
---
You plan.
delegate wire_helper: Check the parser.
"""

HELPER = """---
name: wire_helper
description: Also defined only on the wire
permissions:
  message:
    parent: allow
---
You help.
"""


async def _settled(client: DaemonClient, timeout: float = 30) -> list[t.SessionView]:
    async with asyncio.timeout(timeout):
        while True:
            sessions = await client.every(SESSION_LIST, t.SessionListParams())
            if sessions and all(s.state in (SessionState.IDLE, SessionState.FINISHED)
                                for s in sessions):
                return sessions
            await asyncio.sleep(0.05)


async def _said(client: DaemonClient, sid: str) -> list[str]:
    """What the session's log says of its runs: model output and interruptions."""
    page = await client.request(EVENTS_READ, t.EventsReadParams(after=0, session_id=sid))
    return [f"{e.kind} {e.data.get('reason') or e.data.get('text') or ''}"
            for e in page.events
            if e.kind in (EventKind.MODEL_OUTPUT, EventKind.RUN_INTERRUPTED)]


def test_a_restarted_daemon_still_knows_the_agents_defined_on_the_wire(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def define() -> dict[str, str]:
        client = await daemon.client()
        try:
            lead = await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent_doc=PLANNER, agent_docs=[HELPER]))
            await client.request(
                RUN_SUBMIT, t.RunSubmitParams(session_id=lead.session_id, text="go"))
            return {s.agent: s.session_id for s in await _settled(client)}
        finally:
            await client.close()

    async def again(tree: dict[str, str]) -> dict[str, list[str]]:
        client = await daemon.client()
        try:
            for sid in tree.values():
                await client.request(
                    RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text="once more"))
            await _settled(client)
            return {agent: await _said(client, sid) for agent, sid in tree.items()}
        finally:
            await client.close()

    daemon = DaemonProcess(data)
    try:
        tree = run(define())
        assert set(tree) == {"wire_planner", "wire_helper"}
        code, err = daemon.terminate()
        assert code == 0, err
        daemon = DaemonProcess(data)  # the same data directory
        said = run(again(tree))
    finally:
        daemon.kill()
    for agent, lines in said.items():
        assert not [line for line in lines if line.startswith(EventKind.RUN_INTERRUPTED)], lines
        last = lines[-1]
        assert last.startswith(EventKind.MODEL_OUTPUT) and "once more" in last, (agent, lines)


@pytest.mark.parametrize("params", [
    t.SessionCreateParams(agent_doc=PLANNER,
                          agent_docs=["---\nname: bad name!\ndescription: x\n---\n"]),
    t.SessionCreateParams(agent="no_such_agent", agent_docs=[HELPER]),
])
def test_a_refused_create_keeps_no_doc(daemon: DaemonProcess,
                                       params: t.SessionCreateParams) -> None:
    async def go() -> RpcFailure:
        client = await daemon.client()
        try:
            with pytest.raises(RpcFailure) as refused:
                await client.request(SESSION_CREATE, params)
            listed = await client.every(SESSION_LIST, t.SessionListParams())
            assert not [s for s in listed if s.agent in ("wire_planner", "wire_helper")]
            return refused.value
        finally:
            await client.close()

    refused = run(go())
    assert refused.data_code in (AgentDocError.code, InvalidRequest.code), refused
    kept = daemon.data_dir / REGISTERED_DIR
    assert not kept.exists() or not list(kept.iterdir())
