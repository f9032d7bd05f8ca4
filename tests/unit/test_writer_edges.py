"""The writer's edges: its settings refused out of range, keyword arguments passed through,
the after-call cue (``on_call``, skipped by ``quiet``), the commit count, a call after close
refused, a thread that never holds the interpreter open, a close taken by a batch (a
close queued while a batch still takes calls ends that batch and stops the thread once the
calls queued before it are answered), batches of at most ``max_batch`` calls, and a caller
cancelled inside a batch that leaves the rest of the batch answered."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.unit.test_group_commit import _call, _setup
from treemail.adapters.runtime.writer import Writer
from treemail.core.engine import Engine
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


@pytest.mark.parametrize("settings", [{"max_batch": 0}, {"max_wait": -0.001},
                                      {"max_batch": 0, "max_wait": -1}])
def test_settings_out_of_range_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"max_batch must be >= 1 and max_wait >= 0, not "):
        Writer(**settings)  # type: ignore[arg-type]


def test_no_lanes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^lanes must be >= 1, not 0$"):
        Writer(lanes=0)


def test_the_smallest_settings_are_taken(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    writer = Writer(group=group, max_batch=1, max_wait=0)
    sent = asyncio.run(writer(engine.send_message, ctx, {"to": root, "body": "one"}))
    writer.close()
    assert engine.message(sent.message_id).body == "one"


def test_keywords_reach_the_call_and_each_call_cues_on_call_unless_quiet(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    cues: list[int] = []
    writer = Writer(lambda: cues.append(1), group=group)
    assert writer.batches == 0

    def call(n: int, *, arguments: dict[str, str]) -> str:
        return engine.send_message(_call(ctx, n), arguments).message_id

    async def main() -> tuple[str, str]:
        loud = await writer(call, 1, arguments={"to": root, "body": "loud"})
        quiet = await writer.quiet(call, 2, arguments={"to": root, "body": "quiet"})
        return loud, quiet

    loud, quiet = asyncio.run(main())
    writer.close()
    assert engine.message(loud).body == "loud" and engine.message(quiet).body == "quiet"
    assert cues == [1]  # the quiet call gave no cue
    assert writer.batches == 2  # one commit per call: nothing else was queued


def test_a_call_after_close_is_refused_and_the_thread_is_a_daemon(store: Store) -> None:
    group, engine, root, _ = _setup(store)
    before = set(threading.enumerate())
    writer = Writer(group=group)
    [thread] = [t for t in threading.enumerate() if t not in before]
    assert thread.name == "treemail-writer"  # named in a dump of the process's threads
    assert thread.daemon  # an unclosed writer never keeps the process alive
    writer.close()
    closed = r"^the writer is closed; no engine call can be scheduled$"
    with pytest.raises(RuntimeError, match=closed):
        asyncio.run(writer(engine.session, root))


def test_without_a_group_each_call_runs_alone_and_is_answered(store: Store) -> None:
    _, engine, root, (ctx,) = _setup(store)
    writer = Writer()  # no GroupStore: each call commits by itself

    async def main() -> list[str]:
        sent = []
        for n in range(3):  # one after the other: the queue empties between them
            call = writer(engine.send_message, _call(ctx, n), {"to": root, "body": f"b{n}"})
            sent.append((await asyncio.wait_for(call, LONG)).message_id)
        return sent

    sent = asyncio.run(main())
    writer.close()
    assert [engine.message(mid).body for mid in sent] == ["b0", "b1", "b2"]


def _beside_the_close(store: Store, *, cancel: bool, grouped: bool = False,
                      ) -> tuple[Engine, str, int, str | None]:
    """A call that found the writer open just as another thread closed it, queued behind the
    close; with ``cancel`` its caller gives up while it still waits. Then the writer drains
    and stops (committing in groups if ``grouped``). The engine, the recipient, its pending
    mail before, and the call's message id (None when cancelled)."""
    group, engine, root, (ctx,) = _setup(store)
    writer = Writer(group=group if grouped else None)
    before = len(engine.pending(root))
    started, gate = threading.Event(), threading.Event()
    closer = threading.Thread(target=writer.close)

    def hold() -> None:
        started.set()
        gate.wait(LONG)

    async def main() -> str | None:
        first = asyncio.ensure_future(writer(hold))
        await _until(started, writer, 0)
        closer.start()
        await _until(None, writer, 1)  # the close is queued
        writer._closed = False  # the late call checked before the close began
        late = asyncio.ensure_future(writer(engine.send_message, ctx, {"to": root,
                                                                        "body": "late"}))
        await _until(None, writer, 2)  # queued behind the close
        if cancel:
            late.cancel()
            await asyncio.gather(late, return_exceptions=True)
        gate.set()
        await first
        return None if cancel else (await asyncio.wait_for(late, LONG)).message_id

    sent = asyncio.run(main())
    closer.join(LONG)
    assert not closer.is_alive(), "the writer thread never stopped after the close"
    return engine, root, before, sent


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "in a group"])
def test_a_call_that_slipped_in_beside_the_close_is_still_answered(
        store: Store, grouped: bool) -> None:
    """A call that found the writer open just as another thread closed it is queued behind
    the close: the thread runs it before it stops instead of leaving it unanswered (in a
    group, its batch looks in the same queue for more calls)."""
    engine, _, _, sent = _beside_the_close(store, cancel=False, grouped=grouped)
    assert sent is not None and engine.message(sent).body == "late"


def test_a_call_beside_the_close_whose_caller_was_cancelled_never_runs(store: Store) -> None:
    engine, root, before, _ = _beside_the_close(store, cancel=True)
    assert len(engine.pending(root)) == before


def test_a_batch_holds_at_most_max_batch_calls(store: Store) -> None:
    group, _, _, _ = _setup(store)
    writer = Writer(group=group, max_batch=4, max_wait=60)  # only the count ends a batch
    started, gate = threading.Event(), threading.Event()

    def hold() -> int:
        started.set()
        gate.wait(LONG)
        return writer.batches

    async def main() -> list[int]:
        first = asyncio.ensure_future(writer(hold))
        # Each call answers the number of commits before its own: its batch's index.
        rest = [asyncio.ensure_future(writer(lambda: writer.batches)) for _ in range(16)]
        await _until(started, writer, 16)  # all queued behind the held call
        gate.set()
        return list(await asyncio.wait_for(asyncio.gather(first, *rest), LONG))

    batch_of = asyncio.run(main())
    writer.close()
    assert [batch_of.count(n) for n in range(max(batch_of) + 1)] == [4, 4, 4, 4, 1]


def test_a_caller_cancelled_in_a_batch_leaves_the_others_of_its_batch_answered(
        store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    writer = Writer(group=group, max_wait=60)  # the held call's batch takes the two behind it
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(LONG)

    async def main() -> list[str]:
        first = asyncio.ensure_future(writer(hold))
        rest = [asyncio.ensure_future(writer(engine.send_message, _call(ctx, n),
                                             {"to": root, "body": f"b{n}"})) for n in range(2)]
        await _until(started, writer, 2)
        first.cancel()  # while its call runs: the batch goes on, its answer is dropped
        await asyncio.gather(first, return_exceptions=True)
        gate.set()
        sent = await asyncio.wait_for(asyncio.gather(*rest), LONG)
        return [result.message_id for result in sent]

    sent = asyncio.run(main())
    writer.close()
    assert writer.batches == 1
    assert [engine.message(mid).body for mid in sent] == ["b0", "b1"]
