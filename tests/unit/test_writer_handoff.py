"""How the Writer hands a batch's answers back to its callers' event loops.

A batch wakes each callers' loop once, not once per call; callers on several loops each get
their own answers; a caller cancelled while its call runs leaves the call done and its
answer dropped without error; a caller whose loop is gone does not stop the writer.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.unit.test_group_commit import _call, _setup
from treemail.adapters.runtime.writer import Writer
from treemail.core.records import Owner
from treemail.core.store import Store


def _count_wakeups(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Count the loop's ``call_soon_threadsafe`` calls: each one is a wake-up from the
    writer thread (a self-pipe write and a loop turn)."""
    counter = [0]
    original = loop.call_soon_threadsafe

    def counting(callback: Callable[..., object], *args: Any,
                 context: contextvars.Context | None = None) -> asyncio.Handle:
        counter[0] += 1
        return original(callback, *args, context=context)

    # This loop's only (it ends with the test). mypy checks a method patched on an instance
    # against the unbound signature (with self), hence the assignment code too.
    loop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]
    return counter


def test_a_batch_wakes_its_callers_loop_once(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    gate = threading.Event()
    writer = Writer(group=group, max_wait=60)
    calls = 16

    async def main() -> int:
        wakeups = _count_wakeups(asyncio.get_running_loop())
        # The first call holds the writer until all others are queued behind it.
        first = asyncio.ensure_future(writer(gate.wait))
        rest = [asyncio.ensure_future(writer(engine.send_message, _call(ctx, n),
                                             {"to": root, "body": "hi"})) for n in range(calls)]
        await asyncio.sleep(0.05)
        batches = writer.batches
        gate.set()
        await asyncio.gather(first, *rest)
        assert writer.batches - batches < calls  # not vacuous: the calls shared commits
        return wakeups[0]

    wakeups = asyncio.run(main())
    writer.close()
    assert wakeups <= writer.batches


def test_callers_on_several_loops_each_get_their_answers(store: Store) -> None:
    group, engine, root, contexts = _setup(store, senders=4)
    writer = Writer(group=group)
    answers: dict[int, tuple[list[str], int, float]] = {}

    async def send(lane: int) -> tuple[list[str], int, float]:
        # Each loop must be woken by the writer itself: an answer handed to another lane's
        # loop would still reach this one's future, but only when this loop next woke on its
        # own (at the timeout), so both the wake-ups and the time are checked.
        wakeups, start = _count_wakeups(asyncio.get_running_loop()), time.monotonic()
        sent = await asyncio.wait_for(asyncio.gather(
            *(writer(engine.send_message, _call(ctx, lane), {"to": root, "body": f"lane {lane}"})
              for ctx in contexts)), timeout=30)
        bodies = [engine.message(s.message_id).body for s in sent]
        return bodies, wakeups[0], time.monotonic() - start

    def lane(n: int) -> None:
        answers[n] = asyncio.run(send(n))

    threads = [threading.Thread(target=lane, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    assert {n: bodies for n, (bodies, _, _) in answers.items()} == {
        n: [f"lane {n}"] * len(contexts) for n in range(3)}
    for n, (_, woken, took) in answers.items():
        assert woken >= 1, f"lane {n}'s loop was never woken by the writer"
        assert took < 15, f"lane {n} waited {took:.1f} s: its answers went to another loop"


def test_a_caller_cancelled_while_its_call_runs_drops_the_answer_quietly(
        store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    running, gate = threading.Event(), threading.Event()
    writer = Writer(group=group)
    before = len(engine.pending(root))
    errors: list[dict[str, Any]] = []

    def send_when_let() -> str:
        running.set()
        gate.wait()
        return engine.send_message(ctx, {"to": root, "body": "sent anyway"}).message_id

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, err: errors.append(err))
        caller = asyncio.ensure_future(writer(send_when_let))
        await asyncio.to_thread(running.wait)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        gate.set()
        # The dropped answer was handed back before this one (maybe in the same batch).
        await asyncio.wait_for(writer(lambda: None), timeout=10)
        await asyncio.sleep(0)

    asyncio.run(main())
    writer.close()
    assert errors == []
    assert len(engine.pending(root)) == before + 1


def test_a_caller_whose_loop_closed_does_not_stop_the_writer(store: Store) -> None:
    group, engine, root, (ctx,) = _setup(store)
    running, gate = threading.Event(), threading.Event()
    writer = Writer(group=group)

    def held() -> None:
        running.set()
        gate.wait()

    async def leave_it_running() -> None:
        caller = asyncio.ensure_future(writer(held))
        await asyncio.to_thread(running.wait)
        # asyncio.run cancels the caller and closes its loop while the call still runs.
        assert not caller.done()

    asyncio.run(leave_it_running())
    gate.set()

    async def next_call() -> int:
        sent = await asyncio.wait_for(
            writer(engine.send_message, ctx, {"to": root, "body": "after"}), timeout=10)
        return len([m for m in engine.pending(root)
                    if m.owner is Owner.AGENT and m.message_id == sent.message_id])

    assert asyncio.run(next_call()) == 1
    writer.close()


def test_a_call_raising_stop_iteration_fails_alone(store: Store) -> None:
    """A future refuses StopIteration; the caller gets a RuntimeError instead of hanging,
    and its neighbours in the batch get their answers."""
    group, engine, root, (ctx,) = _setup(store)
    gate = threading.Event()
    writer = Writer(group=group, max_wait=60)

    async def main() -> list[Any]:
        first = asyncio.ensure_future(writer(gate.wait))
        calls = [writer(next, iter(())),
                 writer(engine.send_message, ctx, {"to": root, "body": "beside it"})]
        waiting = asyncio.gather(*calls, return_exceptions=True)
        await asyncio.sleep(0.05)
        gate.set()
        await first
        return await asyncio.wait_for(waiting, timeout=10)

    stopped, sent = asyncio.run(main())
    writer.close()
    assert isinstance(stopped, RuntimeError) and "StopIteration" in str(stopped)
    assert engine.message(sent.message_id).body == "beside it"
