"""Back-pressure: a client that stops reading holds up only its own connection, and what
the daemon keeps for it stays bounded (its queue of frames and the socket's buffer), never
the feed it has yet to send; once it reads again it gets every event, in order.

In-process (the daemon's connection objects are inspected), over a real Unix socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.daemon.conftest import run
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.host import open_daemon
from treemail.protocol import types as t
from treemail.protocol.methods import (
    EVENTS_EVENT,
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    INITIALIZE,
    PLUGIN_PRODUCER_SEND,
    SESSION_CREATE,
    SESSION_LIST,
)

OUT_FRAMES = 8
HIGH_WATER = 64 * 1024  # asyncio's default high-water mark of a socket's write buffer


async def _feed(data: Path, socket: Path) -> tuple[list[tuple[int, int]], int, list[int]]:
    daemon = await open_daemon(data, socket, Limits(out_frames=OUT_FRAMES))
    try:
        busy = await DaemonClient.connect(socket, name="busy")
        root = await busy.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
        for batch in range(12):  # in batches below the in-flight cap: each one is served
            answers = await busy.request_many(PLUGIN_PRODUCER_SEND, [
                t.ProducerSendParams(session_id=root.session_id,
                                     body=f"m{batch}-{i} " + "x" * 200)
                for i in range(50)])
            assert all(isinstance(a, t.ProducerAccepted) for a in answers), answers
        head = (await busy.request(EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
        # The stalled client: it subscribes from the start, then reads nothing for a while.
        reader, writer = await asyncio.open_unix_connection(str(socket))
        for id, method, params in ((1, INITIALIZE.name, {"protocol_version": 19,
                                                      "client_info": {"name": "stalled"}}),
                                   (2, EVENTS_SUBSCRIBE.name, {"after": 0})):
            writer.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method,
                                     "params": params}).encode() + b"\n")
        await writer.drain()
        # Watched until its queue is full (however long a busy machine takes to fill the
        # socket's buffer first): the bound is what is checked, not how fast it is reached.
        seen: list[tuple[int, int]] = []
        async with asyncio.timeout(60):
            while not any(frames >= OUT_FRAMES for frames, _ in seen):
                await asyncio.sleep(0.02)
                seen += [c.buffered for c in daemon.connections if c.name != "c1"]
        for _ in range(5):  # and it stays there while the client reads nothing
            await asyncio.sleep(0.02)
            seen += [c.buffered for c in daemon.connections if c.name != "c1"]
        # Another client is served while the stalled one is stuck (it reads only below): a
        # daemon held up by the stalled client would never answer, and this would time out.
        await busy.request(SESSION_LIST, t.SessionListParams(), timeout=60)
        numbers = await _read_all(reader, head)
        writer.close()
        await busy.close()
        return seen, head, numbers
    finally:
        daemon.request_stop()
        await daemon.stopped.wait()


async def _read_all(reader: asyncio.StreamReader, head: int) -> list[int]:
    numbers: list[int] = []
    while not numbers or numbers[-1] < head:
        message = json.loads(await reader.readline())
        if message.get("method") == EVENTS_EVENT.name:
            numbers.append(message["params"]["event"]["number"])
    return numbers


def test_a_client_that_stops_reading_is_held_to_a_bounded_buffer(tmp_path: Path) -> None:
    seen, head, numbers = run(_feed(tmp_path / "data",
                                                 tmp_path / "data" / "daemon.sock"), 120)
    assert head > 1500  # far more than the queue, the socket and its buffer hold together
    frames = [f for f, _ in seen]
    assert max(frames) <= OUT_FRAMES and max(frames) == OUT_FRAMES  # full, never beyond
    assert max(b for _, b in seen) <= HIGH_WATER + 4096  # one frame past the mark at most
    assert numbers == list(range(1, head + 1))  # resumed: every event, once, in order
