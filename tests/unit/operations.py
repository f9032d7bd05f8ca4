"""Every public engine operation as a runnable case, and a store wrapper that watches it.

The engine's promise is one store transaction per operation: what an operation does commits
whole or not at all, so a failure or a crash leaves the store as it was before the operation
or as it is after it, never in between. Two checks hold it to that, both over ``CASES``:

* ``tests/unit/test_one_transaction.py`` counts the write transactions each case opens
  (``WatchedStore.transactions``): one for a writing operation, none for a reading one;
* ``tests/crash/test_fault_every_write.py`` fails each case at every fault point
  (``WatchedStore`` with ``at``): before each write through the port and right after each
  commit, by raising in-process or by exiting a forked child.

``CASES`` names each public method of ``Engine`` at least once; ``missing_operations`` lists
those without a case, and a test fails on any, so a new operation cannot go unchecked.
``split_commit_request`` is the broken build both checks must catch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import attrs

from tests.unit.conftest import World, agent, arguments
from treemail.core import events, runs
from treemail.core.clock import ManualClock
from treemail.core.engine import Engine
from treemail.core.records import Mode, Owner, Session
from treemail.core.store import ReadTxn, Store, WriteTxn

__all__ = ["CASES", "Case", "WatchedStore", "missing_operations", "split_commit_request"]

T = TypeVar("T")
Op = Callable[[Engine], object]

OPEN = {"*": "allow"}

# The port's write methods: those WriteTxn adds to ReadTxn. Derived, so that a write method
# added to the port is a fault point at once.
WRITES = frozenset(
    name for name, member in vars(WriteTxn).items()
    if callable(member) and not name.startswith("_") and name not in vars(ReadTxn)
    and name != "savepoint")


class InjectedFault(Exception):
    """The failure a ``WatchedStore`` injects in-process at its fault point."""


def _raise() -> None:
    raise InjectedFault("fault injected by the test")


class WatchedStore:
    """A Store that counts the write transactions and reads it is asked for and, with ``at``,
    fails at that fault point (from 1): the points are each write through the port, just
    before it is made, and the end of each commit, just after it. ``fault`` raises
    ``InjectedFault`` by default; a forked child passes one that exits the process."""

    def __init__(self, inner: Store, at: int | None = None,
                 fault: Callable[[], None] = _raise) -> None:
        self.inner = inner
        self.at = at
        self.fault = fault
        self.transactions = 0
        self.reads = 0
        self.points = 0

    def point(self) -> None:
        self.points += 1
        if self.points == self.at:
            self.fault()

    def read(self) -> AbstractContextManager[ReadTxn]:
        self.reads += 1
        return self.inner.read()

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        self.transactions += 1
        result = self.inner.transact(lambda txn: work(_WatchedTxn(txn, self)))
        self.point()
        return result

    def own(self, holder: Mapping[str, str]) -> None:
        self.inner.own(holder)

    def close(self) -> None:
        self.inner.close()


class _WatchedTxn:
    """A write transaction whose writes pass the store's fault points; the rest is the
    wrapped transaction's own."""

    def __init__(self, txn: WriteTxn, store: WatchedStore) -> None:
        self._txn = txn
        self._store = store

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._txn, name)
        if name not in WRITES:
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            self._store.point()
            return found(*args, **kwargs)

        return write

    @contextmanager
    def savepoint(self) -> Iterator[_WatchedTxn]:
        with self._txn.savepoint() as inner:
            yield _WatchedTxn(inner, self._store)


# -- the cases ---------------------------------------------------------------------------------


@attrs.frozen
class Case:
    """``setup`` builds a world in which the operation has work to do, and returns the call
    that makes it; ``writes`` is how many write transactions it may open (0: it only reads)."""

    operation: str
    name: str
    setup: Callable[[World], Op]
    writes: int = 1

    @property
    def id(self) -> str:
        return f"{self.operation}:{self.name}"


def public_operations() -> set[str]:
    return {name for name, member in inspect.getmembers(Engine, inspect.isfunction)
            if not name.startswith("_")}


def _tree(w: World, kid_rules: dict[str, str] | None = None) -> tuple[Session, Session]:
    """A running root and a delegated child, queued with its task."""
    root = w.root("root", OPEN)
    w.activate(root)
    return root, w.child(root, "kid", kid_rules or OPEN)


def _running_kid(w: World) -> tuple[Session, Session, str]:
    root, kid = _tree(w)
    return root, kid, w.activate(kid).run_id


def _open_request(w: World) -> tuple[Session, str, str]:
    """A kid whose run has its task and a sibling's note claimed in an open request."""
    root, kid, run_id = _running_kid(w)
    w.send(root, kid, "a note")
    request = w.engine.begin_request(kid.session_id, run_id)
    return kid, run_id, request.request_id


def _finished_kid(w: World) -> tuple[Session, Session]:
    root, kid = _tree(w)
    w.consume_all(kid)
    return root, kid


def _on_kid(call: Callable[[Engine, str], object]) -> Callable[[World], Op]:
    """An operation on a delegated child, queued with its task."""

    def setup(w: World) -> Op:
        _, kid = _tree(w)
        return lambda e: call(e, kid.session_id)

    return setup


def _held(w: World) -> str:
    """A kid's send to its parent, held by an ``ask`` rule; the parent has no run."""
    root = w.root("root", OPEN)
    kid = w.child(root, "kid", {"parent": "ask"})
    ctx = w.ctx(kid)
    return w.engine.hold_for_approval(ctx, "send_message", arguments(root), "parent").approval_id


def _create_root(w: World) -> Op:
    return lambda e: e.create_root(agent("solo", OPEN))


def _delegate(w: World) -> Op:
    root = w.root("root", OPEN)
    return lambda e: e.delegate(root.session_id, agent("kid", OPEN), "a task",
                                description="does the task")


def _accept_wakes(w: World) -> Op:
    root = w.root("root", OPEN)  # idle: the mail wakes it
    return lambda e: e.accept(root.session_id, "hello", Owner.USER)


def _accept_steers(w: World) -> Op:
    root, _ = _tree(w)
    return lambda e: e.accept(root.session_id, "steer", Owner.USER, mode=Mode.STEER)


def _produce_keyed(w: World) -> Op:
    root = w.root("root", OPEN)
    return lambda e: e.produce(root.session_id, "keyed", Owner.PLUGIN, key="k-1")


def _produce_replayed(w: World) -> Op:
    root = w.root("root", OPEN)
    w.engine.produce(root.session_id, "keyed", Owner.PLUGIN, key="k-1")
    return lambda e: e.produce(root.session_id, "keyed", Owner.PLUGIN, key="k-1")


def _send_wakes(w: World) -> Op:
    root, kid = _finished_kid(w)
    ctx = w.ctx(root)
    return lambda e: e.send_message(ctx, arguments(kid, "wake up"))


def _send_to_running(w: World) -> Op:
    root, kid, _ = _running_kid(w)
    ctx = w.ctx(kid)
    return lambda e: e.send_message(ctx, arguments(root, "progress"))


def _send_replayed(w: World) -> Op:
    root, kid = _finished_kid(w)
    ctx = w.ctx(root)
    w.engine.send_message(ctx, arguments(kid, "once"))
    return lambda e: e.send_message(ctx, arguments(kid, "once"))


def _send_refused(w: World) -> Op:
    root, kid = _tree(w, {"*": "deny"})
    ctx = w.ctx(kid)
    return lambda e: e.send_message(ctx, arguments(root, "denied"))


def _hold(w: World) -> Op:
    root, kid = _tree(w, {"parent": "ask"})
    ctx = w.ctx(kid)
    return lambda e: e.hold_for_approval(ctx, "send_message", arguments(root), "parent")


def _approve(w: World) -> Op:
    approval_id = _held(w)
    return lambda e: e.answer_approval(approval_id, True, "once")


def _deny(w: World) -> Op:
    approval_id = _held(w)
    return lambda e: e.answer_approval(approval_id, False)


def _reconcile(w: World) -> Op:
    root, kid, _ = _running_kid(w)
    w.send(kid, root, "accepted, not yet admitted")  # a running recipient is not reconciled
    return lambda e: e.reconcile(root.session_id)


def _begin(w: World) -> Op:
    root, kid, run_id = _running_kid(w)
    w.send(root, kid, "a note")
    return lambda e: e.begin_request(kid.session_id, run_id)


def _commit(w: World) -> Op:
    kid, run_id, request_id = _open_request(w)
    reply = events.Reply(inputs=("the task",), text="done")
    return lambda e: e.commit_request(kid.session_id, run_id, request_id, reply)


def _abort(w: World) -> Op:
    kid, run_id, request_id = _open_request(w)
    return lambda e: e.abort_request(kid.session_id, run_id, request_id)


def _tool_results(w: World) -> Op:
    _, kid, run_id = _running_kid(w)
    results = (events.RecordedResult("call-1", "sent"),)
    return lambda e: e.record_tool_results(kid.session_id, run_id, results)


def _finish(w: World) -> Op:
    _, kid, run_id = _running_kid(w)
    w.drain(kid, finish=False)
    return lambda e: e.finish_run(kid.session_id, run_id, "the result")


def _cancel(w: World) -> Op:
    kid, run_id, _ = _open_request(w)
    return lambda e: e.cancel_run(kid.session_id, run_id, "the user stopped it")


def _give_up(w: World) -> Op:
    kid, run_id, _ = _open_request(w)
    return lambda e: e.give_up_run(kid.session_id, run_id, "the model kept failing")


def _discard(w: World) -> Op:
    root, kid = _tree(w)
    message_id = w.send(root, kid, "stale").message_id
    return lambda e: e.discard(message_id, "the operator dropped it")


def _sent(w: World) -> tuple[Session, Session, str]:
    root, kid = _tree(w)
    return root, kid, w.send(root, kid, "maybe later").message_id


def _status(w: World) -> Op:
    root, _, message_id = _sent(w)
    return lambda e: e.message_status(root.session_id, message_id)


def _cancel_message(w: World) -> Op:
    root, _, message_id = _sent(w)
    return lambda e: e.cancel_message(root.session_id, message_id)


def _expire(w: World) -> Op:
    clock = ManualClock()
    w.configure(message_ttl_seconds=5)
    w.engine.clock = clock
    _, kid, _ = _sent(w)
    clock.advance(5)

    def op(e: Engine) -> object:
        e.clock = clock  # the case's engine is new: it reads the same clock
        return e.expire_mail(kid.session_id)

    return op


def _recover(w: World) -> Op:
    _open_request(w)  # a run that dies with its request open
    return lambda e: e.recover()


def _reading(call: Callable[[Engine, Session, str], object]) -> Callable[[World], Op]:
    """A read of a world with a bit of everything: pending, claimed and consumed mail."""

    def setup(w: World) -> Op:
        kid, run_id, _ = _open_request(w)
        return lambda e: call(e, kid, run_id)

    return setup


def _first_message(e: Engine, kid: Session) -> object:
    message_id = e.events(kid.session_id)[1].data["message_id"]
    assert isinstance(message_id, str), message_id
    return e.message(message_id)


CASES: tuple[Case, ...] = (
    Case("create_root", "a new tree", _create_root),
    Case("delegate", "a child woken by its task", _delegate),
    Case("accept", "user mail that wakes an idle session", _accept_wakes),
    Case("accept", "user steering into a running run", _accept_steers),
    Case("produce", "keyed plugin mail that wakes an idle session", _produce_keyed),
    Case("produce", "a keyed retry, answered from its key", _produce_replayed),
    Case("send_message", "to a finished peer, which it wakes", _send_wakes),
    Case("send_message", "to a running peer", _send_to_running),
    Case("send_message", "a replayed call", _send_replayed),
    Case("send_message", "a refused call", _send_refused),
    Case("grant", "a session grant", _on_kid(lambda e, s: e.grant("session", s, "parent"))),
    Case("hold_for_approval", "a call an ask rule stopped", _hold),
    Case("answer_approval", "approved: sends and wakes", _approve),
    Case("answer_approval", "denied", _deny),
    Case("revert", "a branch", _on_kid(lambda e, s: e.revert(s))),
    Case("fork", "a child", _on_kid(lambda e, s: e.fork(s))),
    Case("attach", "an external child and its token",
         _on_kid(lambda e, s: e.attach(s, e.session(s).agent, "s" * 43))),
    Case("reconcile", "admits mail to a running run", _reconcile),
    Case("start_run", "a queued run", _on_kid(lambda e, s: e.start_run(s))),
    Case("begin_request", "claims mail", _begin),
    Case("commit_request", "consumes mail, with the model's output", _commit),
    Case("abort_request", "releases mail", _abort),
    Case("record_tool_results", "one result", _tool_results),
    Case("finish_run", "completes a delegation", _finish),
    Case("cancel_run", "with a request open", _cancel),
    Case("give_up_run", "tells the parent", _give_up),
    Case("discard", "pending mail", _discard),
    Case("recover", "a run that died mid-request", _recover),
    Case("message_status", "its sender asks", _status, writes=0),
    Case("cancel_message", "pending mail its sender recalls", _cancel_message),
    Case("expire_mail", "mail past the TTL", _expire),
    Case("shutdown", "refuses sends from now on", lambda w: lambda e: e.shutdown(), writes=0),
    Case("approvals", "pending", _reading(lambda e, k, r: e.approvals()), writes=0),
    Case("stranded_delegations", "none", _reading(lambda e, k, r: e.stranded_delegations()),
         writes=0),
    Case("feed_end", "the last number", _reading(lambda e, k, r: e.feed_end()), writes=0),
    Case("feed", "every event", _reading(lambda e, k, r: e.feed()), writes=0),
    Case("tool_visible", "send_message", _reading(
        lambda e, k, r: e.tool_visible(k.session_id)), writes=0),
    Case("rules_of", "a session", _reading(lambda e, k, r: e.rules_of(k)), writes=0),
    Case("session", "one", _reading(lambda e, k, r: e.session(k.session_id)), writes=0),
    Case("run", "one", _reading(lambda e, k, r: e.run(r)), writes=0),
    Case("message", "one", _reading(lambda e, k, r: _first_message(e, k)), writes=0),
    Case("pending", "claimed mail", _reading(lambda e, k, r: e.pending(k.session_id)), writes=0),
    Case("sessions", "all", _reading(lambda e, k, r: e.sessions()), writes=0),
    Case("events", "a log", _reading(lambda e, k, r: e.events(k.session_id)), writes=0),
)


def missing_operations() -> set[str]:
    """Public engine operations no case calls."""
    return public_operations() - {case.operation for case in CASES}


def cases_of(*operations: str) -> tuple[Case, ...]:
    return tuple(case for case in CASES if case.operation in operations)


# -- the broken build ----------------------------------------------------------------------


@contextmanager
def split_commit_request() -> Iterator[None]:
    """A deliberately broken engine: ``commit_request`` commits the request in one transaction
    and records the model's output in a second, so a crash between the two keeps a committed
    request (its mail consumed) without the reply it produced."""

    def commit_request(self: Engine, session_id: str, run_id: str, request_id: str,
                       output: events.Reply | None = None) -> None:
        self._transact(lambda tx: runs.close(tx, session_id, run_id, request_id,
                                             committed=True))
        if output is not None:
            self._transact(lambda tx: events.record(tx, session_id, events.ModelOutput(
                run_id, request_id, output.inputs, output.text, output.tool_calls)))

    original = Engine.commit_request
    Engine.commit_request = commit_request  # type: ignore[method-assign]
    try:
        yield
    finally:
        Engine.commit_request = original  # type: ignore[method-assign]
