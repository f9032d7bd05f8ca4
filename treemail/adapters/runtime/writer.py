"""``Writer``: the one thread every engine call of the runtime runs on, committing in groups.

LMDB admits one writer at a time, and an fsync must never block the event loop: so the
runtime's actors hand each engine call to this thread and await the answer. Under load the
calls queued behind a commit share the next one (group commit, ``GroupStore``), and a batch's
answers go back to each caller's loop in one wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from treemail.adapters.store.group_commit import GroupStore

__all__ = ["Writer"]

T = TypeVar("T")


class Writer:
    """One thread for every engine call: the store's single writer, off the event loop.

    With ``group`` (the ``GroupStore`` the engine writes through), the writer commits in
    groups: it takes the calls queued behind it, up to ``max_batch`` of them or for up to
    ``max_wait`` seconds, runs them in one write transaction (each ``transact`` of each call
    a savepoint of it, so a failing call is undone alone) and commits once. Each caller is
    answered only after that commit, so an answer means durable; if the commit fails, every
    call of the batch fails with its error. Under load, one fsync serves many calls. A call
    queued while a batch commits waits for the next batch; no call is delayed on purpose.
    Without ``group``, each call runs alone.

    ``on_call`` runs after each call (the feed follower's cue); ``quiet`` skips it, so the
    follower's own reads do not wake it again."""

    def __init__(self, on_call: Callable[[], None] | None = None, *,
                 group: GroupStore | None = None, max_batch: int = 256,
                 max_wait: float = 0.005) -> None:
        if max_batch < 1 or max_wait < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait >= 0, not {max_batch}, "
                             f"{max_wait}")
        self._on_call = on_call
        self._group = group
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self.batches = 0  # commits made, for tests and the bench: calls / batches = group size
        self._thread = threading.Thread(target=self._serve, name="treemail-writer",
                                        daemon=True)
        self._thread.start()

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        result = await self.quiet(fn, *args, **kwargs)
        if self._on_call is not None:
            self._on_call()
        return result

    async def quiet(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise RuntimeError("the writer is closed; no engine call can be scheduled")
        loop = asyncio.get_running_loop()
        job = _Job(functools.partial(fn, *args, **kwargs), loop, loop.create_future())
        self._jobs.put(job)
        try:
            result: T = await job.future
        except asyncio.CancelledError:
            # Only a cancel of this caller ends the wait early (the future is private to it):
            # a job still queued is then skipped; one already running runs on, unanswered.
            job.abandon()
            raise
        return result

    def close(self) -> None:
        """Finish the calls already queued, then stop the thread."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        running = True
        while running:
            job = self._jobs.get()
            if job is None:
                break
            if job.start():
                running = self._run(job)
        # A call that slipped in beside the close is run rather than left unanswered.
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and job.start():
                self._run(job)

    def _run(self, job: _Job) -> bool:
        """Run ``job`` (alone, or with those queued behind it in one batch) and answer.
        Returns False when the batch took the close sentinel."""
        if self._group is None:
            _answer([job], [job.run()])
            return True
        jobs, more = [job], [True]

        def work() -> list[_Outcome]:
            # The store may run this again from scratch (a full map): fresh outcomes each time.
            outcomes: list[_Outcome] = []
            deadline = time.monotonic() + self._max_wait
            while len(outcomes) < len(jobs):
                outcomes.append(jobs[len(outcomes)].run())
                if (len(outcomes) == len(jobs) < self._max_batch and more[0]
                        and time.monotonic() <= deadline):
                    more[0] = self._take(jobs)
            return outcomes

        try:
            outcomes = self._group.batch(work)
        except BaseException as exc:  # nothing of the batch was kept: every call fails alike
            outcomes = [_Outcome(error=exc)] * len(jobs)
        self.batches += 1
        _answer(jobs, outcomes)
        return more[0]

    def _take(self, jobs: list[_Job]) -> bool:
        """Add the next queued call to ``jobs``, if one waits; False at the close sentinel."""
        try:
            job = self._jobs.get_nowait()
        except queue.Empty:
            return True
        if job is None:
            return False
        if job.start():
            jobs.append(job)
        return True


@attrs.frozen
class _Outcome:
    value: Any = None
    error: BaseException | None = None


class _Claim(enum.Enum):
    """Where a job stands between the writer thread and its caller's loop."""

    QUEUED = enum.auto()
    RUNNING = enum.auto()
    SKIPPED = enum.auto()


@attrs.define
class _Job:
    """One call and the caller's future, which only its own loop's thread may touch."""

    call: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    # The writer thread claims the job (``start``) while the caller's loop may drop it
    # (``abandon``); the lock makes exactly one of the two win.
    state: _Claim = _Claim.QUEUED
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def start(self) -> bool:
        """Claim the call for running; False if its caller cancelled it while it waited."""
        with self.lock:
            if self.state is _Claim.SKIPPED:
                return False
            self.state = _Claim.RUNNING
            return True

    def abandon(self) -> None:
        """The caller was cancelled: skip the call if the writer has not claimed it yet."""
        with self.lock:
            if self.state is _Claim.QUEUED:
                self.state = _Claim.SKIPPED

    def run(self) -> _Outcome:
        try:
            return _Outcome(value=self.call())
        except StopIteration as exc:
            # A future refuses StopIteration (it would end the awaiting coroutine silently,
            # PEP 479), and one refused answer would strand the others of its batch.
            return _Outcome(error=RuntimeError(f"the call raised StopIteration: {exc!r}"))
        except Exception as exc:  # the caller's error: its savepoints are already undone
            return _Outcome(error=exc)


def _answer(jobs: Sequence[_Job], outcomes: Sequence[_Outcome]) -> None:
    """Hand each loop its callers' outcomes in one wake-up. Waking a loop from another
    thread costs a self-pipe write and a loop turn; under group commit one per call was a
    large share of a call's cost, so a batch wakes each loop once, whatever its size."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, _Outcome]]] = {}
    for job, outcome in zip(jobs, outcomes, strict=True):
        by_loop.setdefault(job.loop, []).append((job, outcome))
    for loop, answers in by_loop.items():
        # A closed loop refuses the call: nobody is left there waiting for these answers.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, answers)


def _settle(answers: list[tuple[_Job, _Outcome]]) -> None:
    """On the callers' loop: resolve each future, unless its caller was cancelled meanwhile
    (its call ran, but nobody awaits the answer, and a cancelled future takes none)."""
    for job, outcome in answers:
        if job.future.cancelled():
            continue
        if outcome.error is not None:
            job.future.set_exception(outcome.error)
        else:
            job.future.set_result(outcome.value)
