"""``Writer``: the threads every engine call of the runtime runs on, committing in groups.

LMDB admits one writer at a time, and an fsync must never block the event loop: so the
runtime's actors hand each engine call to this thread and await the answer. Under load the
calls queued behind a commit share the next one (group commit, ``GroupStore``), and a batch's
answers go back to each caller's loop in one wake-up.

A store whose transactions can run at once (PostgreSQL shared by daemons: several
connections: the store's ``writers``) gets that many lanes, each a thread with its own
queue and its own group commit. A call goes to the lane of its tree (``tree_lanes``): the
calls of one tree keep one thread and their order, as with one lane, and those of different
trees commit side by side. A call that names no tree takes the first lane.

Why a name that names no session is read again each time (no negative cache): a kept miss
is right only until a session of that name is created, and a stale one would send that
session's calls to the first lane while the rest of its tree runs in its own lane, the
interleaving the lanes exist to prevent. This writer's own creations could retire the kept
misses (its batch count moves after each commit), but a batch ends between any two calls of
one caller, so that would spare only calls queued together; a session another daemon
creates shows only through the store, whose read is what the cache would save. Nor would it
hit: the names that miss are each read once (a message's id, read back after each producer
send; a run's id) or a client's unknown name, answered with an error. The lookup runs only
with several lanes (a shared PostgreSQL store with ``?writers=N`` above one), and a tree
once found is kept (for the last ``KEPT_ROOTS`` names used: a bounded map).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import queue
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from treemail.adapters.store.group_commit import GroupStore

if TYPE_CHECKING:
    from treemail.core.engine import Engine

__all__ = ["Writer", "tree_lanes"]

# What a call's lane is found from: the called function and its positional arguments.
LaneOf = Callable[[Callable[..., Any], tuple[Any, ...]], Hashable | None]

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
    follower's own reads do not wake it again.

    With ``lanes`` above one, each lane is such a thread with its own queue and batches, and
    ``lane_of`` names a call's lane (``tree_lanes``: its tree); one lane is the single
    writer described above."""

    def __init__(self, on_call: Callable[[], None] | None = None, *,
                 group: GroupStore | None = None, max_batch: int = 256,
                 max_wait: float = 0.005, lanes: int = 1,
                 lane_of: LaneOf | None = None) -> None:
        if max_batch < 1 or max_wait < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait >= 0, not {max_batch}, "
                             f"{max_wait}")
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, not {lanes}")
        self._on_call = on_call
        self._group = group
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._lane_of = lane_of if lanes > 1 else None
        self._queues: list[queue.SimpleQueue[_Job | None]] = [
            queue.SimpleQueue() for _ in range(lanes)]
        self._jobs = self._queues[0]  # the first lane's: every call's, with one lane
        self._closed = False
        self.batches = 0  # commits made, for tests and the bench: calls / batches = group size
        self._counted = threading.Lock()
        self._threads = [threading.Thread(target=self._serve, args=(jobs,), daemon=True,
                                          name=f"treemail-writer-{n}" if n else
                                          "treemail-writer")
                         for n, jobs in enumerate(self._queues)]
        for thread in self._threads:
            thread.start()

    def _lane(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> queue.SimpleQueue[
            _Job | None]:
        if self._lane_of is None:
            return self._queues[0]
        key = self._lane_of(fn, args)
        if key is None:
            return self._queues[0]
        return self._queues[zlib.crc32(repr(key).encode()) % len(self._queues)]

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
        self._lane(fn, args).put(job)
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
            for jobs in self._queues:
                jobs.put(None)
        for thread in self._threads:
            thread.join()

    def _serve(self, jobs: queue.SimpleQueue[_Job | None]) -> None:
        running = True
        while running:
            job = jobs.get()
            if job is None:
                break
            if job.start():
                running = self._run(job, jobs)
        # A call that slipped in beside the close is run rather than left unanswered.
        while True:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and job.start():
                self._run(job, jobs)

    def _run(self, job: _Job, queued: queue.SimpleQueue[_Job | None]) -> bool:
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
                    more[0] = self._take(jobs, queued)
            return outcomes

        try:
            outcomes = self._group.batch(work)
        except BaseException as exc:  # nothing of the batch was kept: every call fails alike
            outcomes = [_Outcome(error=exc)] * len(jobs)
        with self._counted:
            self.batches += 1
        _answer(jobs, outcomes)
        return more[0]

    def _take(self, jobs: list[_Job], queued: queue.SimpleQueue[_Job | None]) -> bool:
        """Add the next queued call to ``jobs``, if one waits; False at the close sentinel."""
        try:
            job = queued.get_nowait()
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


# How many names' trees a writer keeps: a daemon's life may see sessions without end, and a
# name dropped is only read again.
KEPT_ROOTS = 65_536


def tree_lanes(engine: Engine, kept: int = KEPT_ROOTS) -> LaneOf:
    """A call's lane: the tree of the session it names first (a session id, a context with
    one, or an approval's id), learnt from the store and kept for the ``kept`` names used
    last; None for a call that names none."""
    roots: OrderedDict[str, str] = OrderedDict()

    def lane_of(fn: Callable[..., Any], args: tuple[Any, ...]) -> Hashable | None:
        if not args:
            return None
        first = args[0]
        named = first if isinstance(first, str) else getattr(first, "session_id", None)
        if not isinstance(named, str):
            return None
        root = roots.get(named)
        if root is not None:
            roots.move_to_end(named)
        else:
            # One read per session, on the caller's thread (outside any batch): a session's
            # tree never changes.
            try:
                with engine.store.read() as tx:
                    session = tx.session(named)
                    if session is None and (approval := tx.approval(named)) is not None:
                        session = tx.session(approval.session_id)  # an approval's answer
            except Exception:  # the call itself will meet the failure and report it
                return None
            if session is None:
                return None
            root = roots[named] = session.root_session_id
            if len(roots) > kept:
                roots.popitem(last=False)
        return root

    return lane_of
