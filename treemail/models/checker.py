"""``treemail check``: a bounded, exhaustive, breadth-first model checker.

Every interleaving of the alphabet (``explore``) is explored from the empty world up to the
bounds, with the engine (``MemoryStore``, ``CountingIds``) and the ``Reference`` model driven
in lockstep. Each explored state keeps its own (model, engine store) pair: a transition
copies both, applies the action to each, and compares the answers (value or error code), the
whole observable state, and the invariants. Copying beats replaying the trace: a copy costs
less than one model operation (see ``snapshots``), a replay one operation per step of the
trace, and the checker spends its time at its deepest levels.

States are deduplicated on a canonical form (``canonical``): every id (session, run, message,
request) is renamed by its order of first appearance in a traversal of the model's world that
follows creation order, seq and run numbers, never id values, and the past no action reads
again is dropped; restarts used, and whether messaging is on, are part of the key.
Breadth-first order plus parent pointers make the first counterexample a shortest one.
Four states in five are at the depth cap, drained but not expanded: each is drained as soon
as it is found new (``Checker._found``), so the search holds the level above the cap, never
the cap's own.

That renaming is the whole symmetry reduction, and it is sound: ids are names to both sides.
They store and look records up by them and order by creation, ordinal or seq, never by id
value (the one list kept in id order, approvals, is compared as a set), so two states that
differ only in which id names what behave alike step for step. Going further is not sound:
two sibling sessions whose histories are swapped are not equivalent, because creation order
is observable (tree order lists the candidates of an unknown handle, orders the drain, and
``seq`` numbers a recipient's mail), and an engine bug may well depend on it.

A refused action that leaves the engine's store and next id exactly as they were, and the
model's world untouched, leads back to its parent: its checks are the parent's, done
(``snapshots.untouched``).

Checked after every transition (ids from spec/invariants.json; ``invariants`` says how): AGREE
(engine/model agreement), INV1, INV2, INV3, INV11 on the events the transition appended, INV4,
INV5, INV6, INV10, INV13, INV14 on a recount of the engine's store, INV12 after a restart; and
from every explored state a drain of a copy of the engine (start, claim, commit, finish until
quiet; new input to a session a give-up left idle with mail) must settle everything accepted,
each message exactly once (INV7, INV1). A drain's
first step is usually a transition the search takes anyway: then the state's drain is that
step plus its successor's drain, and is not run again (``Checker.successors``).

Coverage (``coverage``): the send guards that answered, the transitions the engine took of
every lifecycle the core declares (approvals too), and the grant scopes held calls were
approved in, printed beside the state count.
"""

from __future__ import annotations

import functools
import hashlib
import io
import operator
import pickle
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, TextIO, TypeVar, cast

import attrs

from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import ApprovalState, MessageState, RunState, SessionState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import Mode, Owner, RecipientState
from treemail.models import heap
from treemail.models.actions import Action, Move, failed, outcome, perform, perform_move
from treemail.models.coverage import REPLAY, Coverage, boundary_step, guard_of, recording
from treemail.models.drain import drain_move, drain_step, labelled
from treemail.models.explore import Bounds, alphabet
from treemail.models.invariants import (
    INVARIANTS,
    Failure,
    Ledger,
    agreement,
    limits,
    log_follows,
    mail_shape,
    pending_mail,
    recovered,
    settled,
)
from treemail.models.reference import Reference
from treemail.models.replay import Replay
from treemail.models.snapshots import CopyableWorld, Lockstep, Node, clone, model_step, untouched
from treemail.models.world import FINAL, World

__all__ = [
    "DEFAULT_CONFIG",
    "INVARIANTS",
    "Bounds",
    "Checker",
    "CopyableWorld",
    "Counterexample",
    "Result",
    "canonical",
]

# Limits that are reached within the default bounds: the pair window (two sends to one peer),
# the inbox cap (two children writing to their parent: four messages with their tasks) and
# the hop limit (a relay of relayed mail).
DEFAULT_CONFIG = MessagingConfig(max_hops=1, max_pending_per_session=2, max_inflight_per_pair=1,
                                 message_ttl_seconds=1)  # so expiry is reached too
DRAIN_LIMIT = 200
# The model of a state at the depth cap, which nothing reads (``Checker.successors``).
DRAINED = cast(Reference, None)
T = TypeVar("T")


@attrs.frozen
class Counterexample:
    invariant: str
    detail: str
    trace: tuple[str, ...]


@attrs.frozen
class Result:
    states: int
    transitions: int
    drain_steps: int
    pruned: int
    depth: int
    capped: int  # states at the depth cap, drained but not expanded; 0: the space is exhausted
    seconds: float
    outcomes: dict[str, int]
    counterexample: Counterexample | None
    coverage: Coverage = attrs.Factory(Coverage)
    drained: int = 0  # states whose drain was run through; the others chained into one
    cpu: float = 0.0  # process CPU seconds: what compares between runs on a shared machine


# -- canonical form -----------------------------------------------------------------------------


def canonical(model: Reference, restarts: int, history: bool = False) -> bytes:
    """A digest of the model's world with ids renamed by order of first appearance
    (``canonical_key``)."""
    return hashlib.blake2b(encoded(canonical_key(model, restarts, history)),
                           digest_size=16).digest()


def canonical_key(model: Reference, restarts: int, history: bool = False) -> tuple[Any, ...]:
    """The model's world with ids renamed by order of first appearance.

    Without ``history``, the past is forgotten too: runs that ended (unless a held call names
    one), run numbers, tool calls of ended runs, and which run and request consumed a final
    message (kept only for agent mail consumed by a current run: its hop is that run's base
    hop). Nothing ahead reads them, so a state reached after one more cancelled run is the
    same state; this makes the space finite, and the search can reach the bottom of it.

    Built once per transition the search takes, so written for speed: each id named in place
    where it is known to be named already (the sessions first, then the live runs, then the
    mail), the rest through ``n``, in the same order as a plain traversal would."""
    world = model.world
    sessions = sorted(world.sessions.values(), key=_ORDINAL)
    names: dict[str, int] = {s.session_id: name for name, s in enumerate(sessions)}

    def n(some_id: str | None) -> int | None:
        return None if some_id is None else names.setdefault(some_id, len(names))

    runs_of = world.runs
    live = {s.run_id for s in sessions}
    if world.approvals:
        live |= {a.run_id for a in world.approvals.values() if a.state is ApprovalState.PENDING}
    live |= {r.open_request for r in runs_of.values() if r.run_id in live}
    runs = sorted((r for r in runs_of.values() if history or r.run_id in live),
                  key=lambda r: (n(r.session_id), r.number))
    for run in runs:
        names.setdefault(run.run_id, len(names))
    messages = sorted(world.messages.values(), key=lambda m: (n(m.recipient), m.seq))
    for message in messages:
        names.setdefault(message.message_id, len(names))
    # A session idle after a run that ended may still see a late call from it (``ended_run``).
    ended = {r.session_id for r in runs_of.values() if r.status in _ENDED}
    handles = [(s.handle, f"<{name}>") for name, s in enumerate(sessions)
               if s.handle is not None]
    idle, claimed, agent = SessionState.IDLE, MessageState.CLAIMED, Owner.AGENT
    value = _VALUE
    past = "past"
    key = (
        restarts, model.shut, model.config.enabled,
        [(n(s.root_session_id), n(s.parent_session_id), s.agent.name, s.handle is None,
          s.ordinal, str(s.state), n(s.run_id), s.live,
          s.state == idle and s.session_id in ended)  # a late call's
         for s in sessions],
        [(n(r.session_id), r.number if history else 0, str(r.status), n(r.open_request))
         for r in runs],
        [(names[m.recipient], n(m.sender), value[m.owner],
          m.body if "_" not in m.body else _renamed(m.body, handles), value[m.mode], m.hop,
          m.seq, str(m.state),
          # The run and request that took a message, while anything ahead may read them.
          n(m.run_id) if history or m.run_id is None or (
              (m.state not in FINAL or m.owner is agent) and m.run_id in live) else past,
          n(m.request_id) if history or m.request_id is None or (
              m.state == claimed and m.request_id in live) else past,
          m.reason) for m in messages],
        sorted((n(s), n(r), call, n(v.message_id), value[v.mode], value[v.recipient_state])
               for (s, r, call), v in world.results.items() if history or r in live)
        if world.results else [],
        sorted((n(s), value[owner], key, n(first), mail[0], value[mail[1]], n(mail[2]))
               for (s, owner, key), (first, mail) in world.produced.items())
        if world.produced else [],
        _grants(world, names) if world.grants else [],
        _approvals(world, names) if world.approvals else [],
        sorted(n(sid) or 0 for sid in world.reported) if world.reported else [],
    )
    return key


def _path(names: dict[str, int], text: str) -> tuple[Any, ...]:
    """A grant subject or approval id ("sid/rid/call") with its ids renamed."""
    return tuple(names.get(part, part) for part in text.split("/"))


def _grants(world: World, names: dict[str, int]) -> list[Any]:
    return sorted((scope, _path(names, subject), label) for scope, subject, label in world.grants)


def _approvals(world: World, names: dict[str, int]) -> list[Any]:
    return sorted((_path(names, a.approval_id), a.label, a.state, a.scope,
                   sorted((k, names.get(v, v)) for k, v in (a.outcome or {}).items()))
                  for a in world.approvals.values())


_ENDED = (RunState.FINISHED, RunState.INTERRUPTED)  # as ``ended_run`` reads them


def encoded(key: object) -> bytes:
    """``key`` as bytes that depend on its value alone: a pickle without its memo ("fast"
    mode). With the memo, an object met twice is written once and then referred to, so two
    equal keys that share their strings differently would differ; without it, each value is
    written out whole, and the bytes are a faithful, injective encoding of the key (they
    unpickle to an equal key). Several times as fast as ``repr``, which quoted every string
    and formatted every number."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, 5)
    pickler.fast = True
    pickler.dump(key)
    return out.getvalue()


_ORDINAL = operator.attrgetter("ordinal")
# Enum values by member, read through a table: ``member.value`` is a descriptor call, and the
# canonical form reads two or three per message of every state the search meets.
_VALUE: dict[Any, str] = {m: m.value for m in (*Owner, *Mode, *RecipientState)}


def _renamed(text: str, handles: list[tuple[str, str]]) -> str:
    """A body with each handle in it replaced by its session's new name (a delegation result
    names its child by handle)."""
    if "_" not in text:  # every handle is "<agent>_<hex>" (make_handle): none is here
        return text
    for handle, name in handles:
        text = text.replace(handle, name)
    return text


# -- the search ---------------------------------------------------------------------------------


# The states `treemail check` reaches at its default bounds (``Bounds()``, ``DEFAULT_CONFIG``,
# no history, no planted bug). The count is exact and stable (the same for any number of
# workers), so the progress line can say how long is left; a change to the search that
# changes it shows as a final line past or short of 100%, and this figure is updated.
DEFAULT_STATES = 1_946_064


def expands_nothing(child: Node, action: Action, index: int) -> None:
    """The successors' callback of a state at the depth cap, which has none."""
    raise AssertionError("a state at the depth cap is not expanded")


def eta(visited: int, seconds: float, expected: int | None) -> str:
    """The progress line's end: the states visited per second, and at that rate the time left
    to ``expected`` states (None: bounds other than the default, whose size nobody knows)."""
    rate = visited / seconds if seconds > 0 else 0.0
    shown = f"{rate:,.0f} states/s  "
    if expected is None:
        return shown + "no ETA (non-default bounds)"
    done = f"({visited / expected:.0%} of {expected:,})"
    if rate == 0:
        return shown + f"ETA unknown yet {done}"
    return shown + f"ETA {_clock(max(expected - visited, 0) / rate)} {done}"


def _clock(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class Checker:
    """One search: the parent links of every state found, and the counts it reports."""

    def __init__(self, config: MessagingConfig, bounds: Bounds, progress: TextIO | None = None,
                 history: bool = False, shortcuts: bool = True, replay: Replay | None = None,
                 expected: int | None = None) -> None:
        self.config, self.bounds, self.progress = config, bounds, progress
        self.expected = expected  # the states it will reach, when known (``eta``)
        self.replay = replay  # each transition also run on another store (``replay``)
        self.history = history
        # Off: every drain run through, the model's snapshots always on: the search before
        # those two savings, kept as `just bench`'s baseline for line (h).
        self.shortcuts = shortcuts
        self.parents: dict[bytes, tuple[bytes, str] | None] = {}
        self.outcomes: Counter[str] = Counter()
        self.transitions = self.drain_steps = self.pruned = self.depth = self.capped = 0
        self.drained = 0  # states whose drain ran to the end (the others chain into it)
        self.coverage = Coverage()
        self._shown = 0.0
        # The first shortest counterexample above the depth cap, and at it (``_found``).
        self._best: Counterexample | None = None
        self._bottom: Counterexample | None = None
        self._answer: tuple[Any, ...] = ()  # the model's answer to the last action stepped

    def step(self, node: Node, action: Action) -> tuple[Node, Failure | None, bool]:
        """Apply ``action`` to copies of both sides; compare answers, states, invariants.
        Also says whether the engine accepted the action."""
        child, failure, accepted = self._step(node, action)
        if failure is None and self.replay is not None:
            failure = self.replay.check(node.key, action, self._answer, child.model)
        return child, failure, accepted

    def _step(self, node: Node, action: Action) -> tuple[Node, Failure | None, bool]:
        model, store, ids = clone(node)
        assert isinstance(model, Lockstep)
        got = outcome(lambda: perform(action, Engine(store, ids, node.config)))
        model, want = model_step(node, model, action)
        self._answer = want
        if got == want and want[0] == "error" and model is node.model and \
                action.kind != "restart" and untouched(node, store, ids):
            self._count(action, want)
            # Refused alike, and neither side changed: the child is the parent, whose state
            # passed every check already. (The store compared table by table is a stronger
            # check than the invariants: a refusal must leave it exactly as it was.)
            return Node(node.model, node.store, node.ids, node.restarts, node.depth + 1,
                        node.feed, node.config, node.ledger, node.key), None, False
        with store.read() as tx:
            events = list(tx.feed(node.feed))
            config = node.config
            if action.kind == "restart" and action.args == (False,):
                config = attrs.evolve(config, enabled=False)
            child = Node(model, store, ids, node.restarts + (action.kind == "restart"),
                         node.depth + 1, events[-1][0] if events else node.feed, config,
                         node.ledger.then(events))
            if got != want:
                return child, ("AGREE", f"{action.kind} answered differently\n"
                                        f"    engine: {got!r}\n    model:  {want!r}"), False
            self._count(action, want)
            sessions = list(tx.sessions())  # read once for the checks that all list them
            pending = pending_mail(tx, sessions)  # both recount it
            failure = (agreement(tx, ids, model, pending, sessions)
                       or limits(tx, self.config, pending, sessions)
                       or mail_shape(tx, model.world, self.config)
                       or log_follows(tx, node.model.world, model.world, [e for _, e in events])
                       or (recovered(tx) if action.kind == "restart" else None))
        return child, failure, got[0] == "ok"

    def _count(self, action: Action, answer: tuple[Any, ...]) -> None:
        self.outcomes["ok" if answer[0] == "ok" else str(answer[1])] += 1
        if action.kind == "send_message":
            self._reached(action, answer)
        elif action.kind == "answer_approval" and answer[0] == "ok" and action.args[1]:
            self.coverage.scopes.add(str(action.args[2]))  # (approval id, approve, scope)
        elif (step := boundary_step(action.kind, action.args, answer)) is not None:
            self.coverage.boundary.add(step)

    def _reached(self, action: Action, answer: tuple[Any, ...]) -> None:
        guard = REPLAY if answer[0] == "ok" and action.label.endswith(" retry)") else (
            guard_of(str(answer[1])) if answer[0] == "error" else None)
        if guard is not None:
            self.coverage.guards.add(guard)

    def path(self, node: Node) -> tuple[str, ...]:
        """The labels of the actions from the empty world to ``node``."""
        return self.trace(node.key)

    def trace(self, key: bytes) -> tuple[str, ...]:
        steps: list[str] = []
        link = self.parents[key]
        while link is not None:
            key, label = link
            steps.append(label)
            link = self.parents[key]
        return tuple(reversed(steps))

    def drain(self, node: Node) -> Counterexample | None:
        """INV7 and INV1 from ``node``: run a copy of the engine's store until quiet. The
        drain drives the engine alone (no model step to compare): it checks a property of
        the engine, at a fifth of a lockstep step's cost. (Drains stepped in lockstep could
        stop where another drain passed, but drains from different states rarely meet:
        measured, that saved a fifth of the steps at five times their cost; and only one in
        twenty states at the depth cap drains, in one step, into an explored state.)"""
        if node.depth >= self.bounds.depth:
            # A state at the cap is only drained, and holds the one reference to its store
            # (a refusal that changed nothing shares its parent's, but is never queued): the
            # drain may run on it instead of on a copy.
            store, ids = node.store, node.ids
        else:
            _, store, ids = clone(node, with_model=False)
        engine, steps = Engine(store, ids, node.config), list[Move]()
        for _ in range(DRAIN_LIMIT):
            with store.read() as tx:
                move = drain_move(tx)
                if move is None:
                    failure = settled(tx, node.ledger)
                    return None if failure is None else self._drained(node, steps, *failure)
            steps.append(move)
            self.drain_steps += 1
            try:  # not through ``outcome``: a drain reads no answer, only whether one came
                perform_move(move, engine)
            except Exception as exc:
                return self._drained(node, steps, "INV7",
                                     f"the drain was refused: {failed(exc)!r}")
        return self._drained(node, steps, "INV7", f"no quiet state after {DRAIN_LIMIT} drain "
                                                  "steps")

    def _drained(self, node: Node, steps: list[Move], invariant: str, detail: str
                 ) -> Counterexample:
        """A drain's failure, with the trace to ``node`` and the drain's steps after it (the
        trace and the steps' labels are built only here: nearly every drain passes)."""
        drained = tuple(f"{labelled(move).label}   [drain]" for move in steps)
        return Counterexample(invariant, detail, (*self.path(node), *drained))

    def successors(self, node: Node, found: Callable[[Node, Action, int], None]
                   ) -> tuple[Counterexample | None, bool]:
        """Every successor of ``node`` checked, and each within the size bounds handed to
        ``found`` with its key and the index of its action in the alphabet. Also says whether
        the first step of ``node``'s drain was among them, accepted, into a state that is
        explored (so drained itself): then ``node``'s drain is that step plus its successor's
        drain, and need not be run again (see ``run``)."""
        with node.store.read() as tx:
            first = drain_step(tx)
        chained = False
        for index, action in enumerate(alphabet(node.model, self.bounds, node.restarts)):
            child, failure, accepted = self.step(node, action)
            self.transitions += 1
            if failure is not None:
                return Counterexample(*failure, (*self.path(node), action.label)), chained
            drains = first is not None and (action.kind, action.args) == (first.kind, first.args)
            if drains and not accepted:
                return Counterexample("INV7", "the drain was refused",
                                      (*self.path(node), action.label)), chained
            cw = child.model.world
            if (len(cw.sessions) > self.bounds.sessions or len(cw.messages) > self.bounds.messages
                    or len(cw.approvals) > self.bounds.approvals):
                self.pruned += 1  # checked above, not explored further
                continue
            chained = chained or drains
            if not child.key:  # a refusal that changed nothing keeps its parent's key
                child.key = canonical(child.model, child.restarts, self.history)
            if child.key != node.key:  # the parent is explored already
                if child.depth >= self.bounds.depth:
                    # At the cap a state is drained, never expanded, and the drain runs the
                    # engine alone: its model (a third of its memory, and of its pickle when
                    # the pool moves it) goes now. Any later read of it fails loudly.
                    child.model = DRAINED
                found(child, action, index)
        return None, chained

    def run(self) -> Result:
        with recording(self.coverage), heap.eased():
            return self._search()

    def root(self) -> Node:
        """The empty world, on both sides."""
        model = Lockstep(self.config, CountingIds())
        model.guarded = not self.shortcuts
        root = Node(model, MemoryStore(), CountingIds(), 0, 0, 0, self.config, Ledger())
        root.model.world = CopyableWorld()
        root.key = canonical(root.model, 0, self.history)
        return root

    def visit(self, node: Node, found: Callable[[Node, Action, int], None],
              shortest: int | None) -> list[Counterexample]:
        """``node`` expanded (below the depth cap, and while a counterexample shorter than
        ``shortest`` may come of it) and drained (unless its drain chained): what failed."""
        self.depth = max(self.depth, node.depth)
        expand = node.depth < self.bounds.depth
        self.capped += not expand
        failures: list[Counterexample | None] = []
        chained = False
        if expand and (shortest is None or node.depth + 1 < shortest):
            failure, chained = self.successors(node, found)
            failures.append(failure)
        # A drain is a path of the search's own transitions: when its first step is one
        # the search took into an explored state, the rest is that state's drain.
        if not (chained and self.shortcuts):
            failures.append(self.drain(node))
            self.drained += 1
        return [failure for failure in failures if failure is not None]

    def _search(self) -> Result:
        started, cpu = time.monotonic(), time.process_time()
        root = self.root()
        self.parents[root.key] = None
        if self.replay is not None:
            self.replay.reached(root.key, None, None)
        queue, level = deque([root]), -1
        self._best = self._bottom = None
        while queue:
            node = queue.popleft()
            best: Counterexample | None = self._best
            if best is not None and node.depth >= len(best.trace):
                break  # nothing shorter is left to find
            if node.depth > level:
                level = node.depth
                heap.settle()
            self._show(len(queue), started)
            found = functools.partial(self._found, node, queue)
            for failure in self.visit(node, found, None if best is None else len(best.trace)):
                if self._best is None or len(failure.trace) < len(self._best.trace):
                    self._best = failure
        self._show(len(queue), started, final=True)
        # The states at the cap come after every other in the search's order: of two
        # counterexamples as short, one of theirs is the later.
        best, bottom = self._best, self._bottom
        if bottom is not None and (best is None or len(bottom.trace) < len(best.trace)):
            best = bottom
        return self.result(len(self.parents), best, time.monotonic() - started,
                           time.process_time() - cpu)

    def _found(self, parent: Node, queue: deque[Node], child: Node, action: Action,
               index: int) -> None:
        del index  # the queue keeps the order of discovery
        if child.key in self.parents:
            return
        self.parents[child.key] = (parent.key, action.label)
        if self.replay is not None:
            self.replay.reached(child.key, parent.key, action)
        if child.depth < self.bounds.depth:
            queue.append(child)
            return
        # A state at the cap is drained now, not queued: the search held the whole bottom
        # level (four states in five) until its turn, and the drain's verdict is the same
        # whenever it runs. It is drained only where its turn would have come: before any
        # counterexample as short as its depth (its own are no shorter), and its failures
        # are kept apart from the others' (``_search``): the order it would have met them in
        # is after every state above the cap, and the bottom's own order is this one.
        shortest = min((len(f.trace) for f in (self._best, self._bottom) if f is not None),
                       default=None)
        if shortest is not None and child.depth >= shortest:
            return
        for failure in self.visit(child, expands_nothing, None):
            if self._bottom is None or len(failure.trace) < len(self._bottom.trace):
                self._bottom = failure

    def result(self, states: int, best: Counterexample | None, seconds: float, cpu: float
               ) -> Result:
        return Result(states, self.transitions, self.drain_steps, self.pruned, self.depth,
                      self.capped, seconds, dict(self.outcomes), best, self.coverage,
                      self.drained, cpu)

    def _show(self, queued: int, started: float, final: bool = False) -> None:
        """A single progress line on stderr, redrawn at most five times a second."""
        now = time.monotonic()
        if self.progress is None or (now - self._shown < 0.2 and not final):
            return
        self._shown = now
        # Visited, not found: the queue holds the next level, found long before it is done.
        left = eta(len(self.parents) - queued, now - started, self.expected)
        self.progress.write(f"\r  states {len(self.parents):>8}  transitions "
                            f"{self.transitions:>9}  depth {self.depth:>2}  queue {queued:>7}  "
                            f"{left} " + ("\n" if final else ""))
        self.progress.flush()
