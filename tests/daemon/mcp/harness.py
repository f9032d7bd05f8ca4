"""Driving ``treemail mcp`` the way an MCP host does: the ``mcp`` SDK's own client, over stdio
(the host launches the server) and over streamable HTTP (a loopback server, one bearer token
per request), against a real daemon subprocess.

A tree: a hosted root (``lead``, the daemon's scripted model) and external children attached
with ``external.attach``; every external agent may message its parent and its siblings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ResourceUpdatedNotification, TextContent

from tests.daemon.conftest import DaemonProcess
from treemail.adapters.daemon.client import DaemonClient
from treemail.protocol import external as x
from treemail.protocol import methods as m
from treemail.protocol import types as t

ROOT = Path(__file__).resolve().parents[2]

WORKER = """---
name: worker
description: An external agent
permissions:
  message:
    parent: allow
    sibling: allow
---
You work.
"""

LEAD = """---
name: lead
description: Plans and answers
permissions:
  message:
    child: allow
---
You lead.
"""

# An agent doc without any message rule: send_message is not offered.
MUTE = """---
name: mute
description: Reads only
---
You read.
"""


def data_dir(base: Path) -> Path:
    """A data directory whose agents are the worker and the mute reader."""
    (base / "agents").mkdir(parents=True)
    (base / "agents" / "worker.md").write_text(WORKER)
    (base / "agents" / "mute.md").write_text(MUTE)
    return base


@attrs.frozen
class Member:
    session_id: str
    handle: str
    token: str
    token_id: str


@attrs.frozen
class Tree:
    lead_id: str
    lead: str  # its handle
    members: tuple[Member, ...]


async def make_tree(client: DaemonClient, externals: int = 2, agent: str = "worker") -> Tree:
    lead = await client.request(m.SESSION_CREATE, t.SessionCreateParams(agent_doc=LEAD))
    members = []
    for _ in range(externals):
        made = await client.request(m.EXTERNAL_ATTACH, x.ExternalAttachParams(
            parent_session_id=lead.session_id, agent=agent))
        members.append(Member(made.session.session_id, made.session.handle or "",
                              made.token, made.token_id))
    return Tree(lead.session_id, lead.handle or "", tuple(members))


@contextlib.asynccontextmanager
async def user_tree(daemon: DaemonProcess, externals: int = 2,
                    agent: str = "worker") -> AsyncIterator[tuple[DaemonClient, Tree]]:
    """The user's connection to ``daemon`` and a new tree made over it (``make_tree``);
    the connection is closed afterwards."""
    client = await daemon.client()
    try:
        yield client, await make_tree(client, externals, agent)
    finally:
        await client.close()


async def state_of(client: DaemonClient, message_id: str) -> str:
    receipt = await client.request(m.MESSAGE_GET, t.MessageGetParams(message_id=message_id))
    return str(receipt.message.state)


async def until_state(client: DaemonClient, message_id: str, wanted: str) -> None:
    async with asyncio.timeout(30):
        while await state_of(client, message_id) != wanted:
            await asyncio.sleep(0.05)


async def sent_by(daemon: DaemonProcess, token: str, to: str, body: str) -> str:
    """Agent mail from the session ``token`` binds, over a bound daemon connection."""
    bound = await daemon.client()
    try:
        await bound.request(m.EXTERNAL_BIND, x.ExternalBindParams(token=token))
        done = await bound.request(m.EXTERNAL_CALL, x.ExternalCallParams(
            tool_call_id=f"t-{body}", name="send_message", arguments={"to": to, "body": body}))
        message_id: str = decoded(done.content)["message_id"]
        return message_id
    finally:
        await bound.close()


def token_file(directory: Path, token: str, name: str = "session.token") -> Path:
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return path


def _program(daemon: DaemonProcess, socket: Path | None, *args: str) -> list[str]:
    """``treemail mcp`` for ``daemon``, through ``socket`` when given (a test's relay)."""
    where = ("--socket", str(socket)) if socket is not None else ()
    return [sys.executable, "-m", "treemail", "mcp", "--data-dir", str(daemon.data_dir),
            *where, *args]


@contextlib.asynccontextmanager
async def stdio_session(daemon: DaemonProcess, token_path: Path,
                        heard: list[str] | None = None,
                        socket: Path | None = None) -> AsyncIterator[ClientSession]:
    """An MCP client that launched ``treemail mcp --token-file`` as its host would;
    ``heard`` collects the URIs of the resource updates it is sent."""
    program = _program(daemon, socket, "--token-file", str(token_path))
    params = StdioServerParameters(command=program[0], args=program[1:], cwd=str(ROOT))
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), \
                ClientSession(read, write, message_handler=_hearing(heard)) as session:
            await session.initialize()
            yield session


def _hearing(heard: list[str] | None) -> Any:
    async def handler(message: Any) -> None:
        if heard is not None and isinstance(message, ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    return handler


class HttpServer:
    """``treemail mcp --http 127.0.0.1:0`` in a subprocess; ``url`` is where it listens."""

    def __init__(self, daemon: DaemonProcess, socket: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            _program(daemon, socket, "--http", "127.0.0.1:0"),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, cwd=ROOT)
        assert self.proc.stderr is not None
        said = []
        for line in self.proc.stderr:  # it says where it listens once it does
            said.append(line)
            if found := re.search(r"serving (http://\S+)", line):
                self.url = found.group(1)
                break
        else:
            raise RuntimeError(f"treemail mcp --http did not start: {''.join(said)}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=20)


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None,
                       heard: list[str] | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    # httpx's own default is 5 s a request: too short for a machine under a full test load.
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as (read, write, *_), \
            ClientSession(read, write, message_handler=_hearing(heard)) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def mcp_client(transport: str, daemon: DaemonProcess, token: str, where: Path, *,
                     http: HttpServer | None = None, heard: list[str] | None = None,
                     socket: Path | None = None) -> AsyncIterator[ClientSession]:
    """An MCP client acting with ``token``: over stdio (a server of its own, launched with a
    token file in ``where``, through ``socket`` when given) or over HTTP (to ``http``)."""
    if transport == "stdio":
        path = where / f"{token[-12:]}.token"
        if not path.exists():  # a second client of the same token launches with it again
            token_file(where, token, path.name)
        async with stdio_session(daemon, path, heard, socket) as session:
            yield session
    else:
        assert http is not None, "an HTTP client needs the server it talks to"
        async with http_session(http.url, token, heard) as session:
            yield session


def text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def answer(result: CallToolResult) -> dict[str, Any]:
    """A send_message's (or a refusal's) JSON object."""
    return decoded(text(result))


def decoded(content: str) -> dict[str, Any]:
    """A tool result's JSON object, from its text."""
    value = json.loads(content)
    assert isinstance(value, dict)
    return value


def mail_of(result: CallToolResult) -> list[dict[str, Any]]:
    """check_mail's messages: id, owner and the envelope text the model reads."""
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    messages = result.structured_content["messages"]
    assert isinstance(messages, list)
    return messages


def children_running(fragment: str) -> list[int]:
    """This process's children whose command line holds ``fragment`` (an MCP server the SDK
    client launched, which it does not name)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                line = cmd.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if parent == os.getpid() and fragment in line:
            found.append(int(entry))
    return found
