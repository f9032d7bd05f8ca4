"""The writer's close, taken by a batch: a close queued while a batch still takes calls ends
that batch and stops the thread once the calls queued before it are answered."""

from __future__ import annotations

import asyncio
import threading

from tests.unit.test_group_commit import _setup
from treemail.adapters.runtime.writer import Writer
from treemail.core.store import Store

LONG = 30.0  # seconds: a liveness bound for a thread that must stop, never a race


async def _until(condition: threading.Event | None, queued: Writer, count: int) -> None:
    """Yield to the loop until ``condition`` is set and ``count`` jobs wait in the queue."""
    while (condition is not None and not condition.is_set()) or \
            queued._jobs.qsize() < count:
        await asyncio.sleep(0.001)


def test_a_close_a_batch_takes_stops_the_writer(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    writer = Writer(group=group, max_wait=60)  # the batch would take calls for a minute
    started, gate = threading.Event(), threading.Event()
    closer = threading.Thread(target=writer.close)

    def hold() -> None:
        started.set()
        gate.wait(LONG)

    async def main() -> str:
        first = asyncio.ensure_future(writer(hold))
        second = asyncio.ensure_future(writer(engine.send_message, ctx, {"to": root,
                                                                          "body": "hi"}))
        await _until(started, writer, 1)  # the batch runs the first; the second waits
        closer.start()
        await _until(None, writer, 2)  # the close is queued behind the second
        gate.set()  # the batch takes the second, then the close: it must end there
        await first
        return (await second).message_id

    sent = asyncio.run(main())
    closer.join(LONG)
    assert not closer.is_alive(), "the writer thread never stopped after taking the close"
    assert engine.message(sent).body == "hi"
