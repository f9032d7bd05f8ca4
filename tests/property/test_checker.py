"""The bounded model checker: it explores something real, finds nothing in the engine as it
is, and finds bugs planted in the engine, each with a shortest trace.

Trace lengths were worked out by hand. A send needs a running run, and a session has one only
after mail woke it: create the root, give a session mail (delegate a child, whose task wakes
it), start that run. So the earliest send is action 4, and a bug that needs two sends, or a
claim (begin_request) and then one more action, shows at action 5 and no earlier.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from treemail.adapters.store.lmdb_txn import LmdbTables
from treemail.adapters.ui.cli import _scratch_lmdb, main
from treemail.core import engine, guards, runs, sending, transitions
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import (
    ApprovalRequired,
    IdempotencyConflict,
    IllegalTransition,
    InflightFull,
    InvalidToolContext,
    MaxHopsExceeded,
    MessagingDisabled,
    SelfSend,
    UnknownSubagentReference,
)
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import (
    ApprovalState,
    MessageState,
    MessageTrigger,
    RunTrigger,
    SessionState,
)
from treemail.core.memory_store import MemoryStore
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Message, Owner, ToolContext
from treemail.models import checker, invariants
from treemail.models.actions import outcome
from treemail.models.checker import (
    DEFAULT_CONFIG,
    INVARIANTS,
    Bounds,
    CopyableWorld,
    canonical,
)
from treemail.models.coverage import ALL_GUARDS, ALL_SCOPES, ALL_TRANSITIONS, BOUNDARY
from treemail.models.invariants import Ledger, settled
from treemail.models.parallel import check
from treemail.models.plants import PLANTS, planted
from treemail.models.reference import Reference

# Small enough to be exhausted (no state left at the depth cap) in a few seconds. One tree,
# and every restart keeps the config: the second tree and the restart that turns messaging
# off have their own tests.
SMALL = Bounds(sessions=2, messages=2, restarts=1, depth=20, disabled=0, trees=1, external=0)
# A pair window below the inbox cap, so the window is the guard that answers.
WINDOWED = MessagingConfig(max_pending_per_session=2, max_inflight_per_pair=1, max_hops=1)
SPEC = Path(__file__).resolve().parents[2] / "spec" / "invariants.json"
APPROVAL_STEPS = [("ApprovalLifecycle", ApprovalState.PENDING, "approve"),
                  ("ApprovalLifecycle", ApprovalState.PENDING, "deny")]


def test_the_engine_passes_and_the_search_is_real() -> None:
    result = check(WINDOWED, SMALL)
    assert result.counterexample is None
    assert result.capped == 0 and result.depth > 10  # the whole space, down to its bottom
    assert result.states > 1500 and result.transitions > 5 * result.states
    # Every state's drain is checked: run through from the states whose first drain step
    # leaves the explored space, the rest chained into an explored successor's drain.
    assert 0 < result.drained < result.states and result.drain_steps >= result.drained
    # The limits are reached, and the hostile forms are refused, within these bounds.
    for code in (InflightFull.code, MaxHopsExceeded.code,
                 SelfSend.code,
                 UnknownSubagentReference.code, IllegalTransition.code):
        assert result.outcomes.get(code, 0) > 0, code


def test_the_default_search_to_depth_5_is_the_size_it_was() -> None:
    """The search's size is pinned where the suite can afford it: a change to the alphabet,
    the state key or the drain that explores more or less shows here, not only in the deep
    run at the default bounds (``DEFAULT_STATES``, outside ``just test``). A deliberate
    change updates these figures (``treemail check --bounds depth=5`` prints them)."""
    result = check(DEFAULT_CONFIG, attrs.evolve(Bounds(), depth=5))
    assert result.counterexample is None
    assert (result.states, result.transitions, result.drain_steps, result.drained) == (
        1596, 3676, 12867, 1389)


def test_pair_window_off_by_one_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = guards.check_inflight  # what sending imports

    def check_inflight(pair_pending: int, config: MessagingConfig) -> None:
        original(pair_pending - 1, config)

    monkeypatch.setattr(sending, "check_inflight", check_inflight)
    found = check(WINDOWED, SMALL).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert InflightFull.code in found.detail
    assert len(found.trace) == 5  # create, delegate, start the child, send, send again
    assert [label.split("(")[0] for label in found.trace[-2:]] == ["send_message"] * 2


def test_claims_kept_at_recovery_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = runs._end

    def _end(tx: Any, session: Any, run: Any, event: RunTrigger, reason: str,
             **rest: Any) -> None:
        if reason == "crash found at restart":  # forget the open request: no release
            run = attrs.evolve(run, open_request=None)
        original(tx, session, run, event, reason, **rest)

    monkeypatch.setattr(runs, "_end", _end)
    found = check(WINDOWED, SMALL).counterexample
    assert found is not None
    assert len(found.trace) == 5  # create, delegate, start, begin (claims the task), restart
    assert found.trace[3].startswith("begin_request") and found.trace[4].startswith("restart")


def test_discard_of_claimed_mail_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = transitions.step_message  # what engine imports

    def step_message(tx: Any, message: Message, event: MessageTrigger, **changes: Any) -> Message:
        if event is MessageTrigger.DISCARD and message.state == MessageState.CLAIMED:
            message = attrs.evolve(message, state=MessageState.RELEASED)
        result: Message = original(tx, message, event, **changes)
        return result

    monkeypatch.setattr(engine, "step_message", step_message)
    found = check(WINDOWED, SMALL).counterexample
    assert found is not None and IllegalTransition.code in found.detail
    assert len(found.trace) == 5  # create, delegate, start, begin, discard the claimed task
    assert found.trace[-1].startswith("discard(") and MessageState.CLAIMED in found.trace[-1]


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    small = "--bounds=sessions=2,messages=2,depth=4,trees=1"
    assert main(["check", small, "--quiet"]) == 0
    assert "no counterexample" in capsys.readouterr().out
    # The bug planted by name, from the command line, answers with its shortest trace.
    assert main(["check", "--bounds=sessions=2,messages=2,trees=1", "--quiet",
                 "--plant=discard-claimed"]) == 1
    out = capsys.readouterr().out
    assert "planted bug: discard-claimed" in out and "shortest trace (5 actions)" in out
    assert main(["check", "--bounds=sessions=two"]) == 2
    assert main(["check", "--messaging=max_inflight_per_pair=-1"]) == 2
    assert main(["check", "--plant=nonsense"]) == 2


def test_invariant_names_follow_the_spec() -> None:
    spec = {inv["id"]: inv["name"] for inv in json.loads(SPEC.read_text())["invariants"]}
    assert {k: v for k, v in INVARIANTS.items() if k != "AGREE"}.items() <= spec.items()


def _world_after(ids_from: int, delegate_first: bool) -> Reference:
    model = Reference(MessagingConfig(), CountingIds(start=ids_from))
    model.world = CopyableWorld()
    root = model.create_root(AgentSpec("worker"))
    steps: list[Callable[[], object]] = [lambda: model.delegate(root, AgentSpec("worker"), "task"),
             lambda: model.accept(root, "note", Owner.USER)]
    for do in steps if delegate_first else steps[::-1]:
        do()
    return model


def test_canonical_form_ignores_id_numbering_only() -> None:
    a, b = _world_after(1, True), _world_after(500, False)
    assert set(a.world.sessions).isdisjoint(b.world.sessions)
    assert canonical(a, 0) == canonical(b, 0)
    assert canonical(a, 0) != canonical(a, 1)  # restarts used are part of the state
    b.start_run(next(iter(b.world.sessions)))
    assert canonical(a, 0) != canonical(b, 0)


def test_canonical_encoding_depends_on_values_alone() -> None:
    """The key's bytes are a pickle without its memo: equal keys give equal bytes however
    their strings are shared (a memo would write a shared string once and refer back), and
    keys that differ as values, ``repr`` would tell apart, differ."""
    name = "worker_0a1b"
    shared = (1, [(name, name, "hi")], [(0, name)])
    fresh = (1, [("".join(["worker", "_0a1b"]), "".join(["worker_", "0a1b"]), "hi")],
             [(0, "worker_0a1b"[:])])
    assert shared == fresh and shared[1][0][0] is not fresh[1][0][0]
    assert checker.encoded(shared) == checker.encoded(fresh)
    different = [(1,), (True,), [1], ("1",), (None,), ("None",), (1.0,), ((1, None),),
                 ((1, "past"),), (ApprovalState.PENDING,), (ApprovalState.PENDING.value,)]
    assert len({checker.encoded(key) for key in different}) == len(different)
    assert len({repr(key) for key in different}) == len(different)


def test_copied_world_is_independent() -> None:
    model = _world_after(1, True)
    twin = copy.deepcopy(model.world)
    assert twin == model.world
    session = next(iter(twin.sessions.values()))
    session.state = SessionState.FINISHED
    next(iter(twin.messages.values())).state = MessageState.DISCARDED
    assert next(iter(model.world.sessions.values())).state != SessionState.FINISHED
    assert all(m.state != MessageState.DISCARDED for m in model.world.messages.values())


def test_a_drain_failure_at_the_bottom_is_found_through_chained_drains(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Most drains are chained (see ``Checker.successors``): a quiet state must still be
    judged. A planted verdict refuses any quiet state where agent mail was consumed."""
    original = invariants.settled  # what checker imports

    def settled(tx: Any, *ledger: Any) -> Any:
        for session in tx.sessions():
            for event in tx.events(session.session_id):
                if (event.kind == EventKind.PRODUCER_MESSAGE_CONSUMED
                        and event.data["owner"] == "agent"):
                    return ("INV7", "planted: agent mail consumed")
        return original(tx, *ledger)

    monkeypatch.setattr(checker, "settled", settled)
    found = check(WINDOWED, attrs.evolve(SMALL, restarts=0, depth=6)).counterexample
    assert found is not None and found.detail == "planted: agent mail consumed"
    assert any(label.startswith("send_message") for label in found.trace)


def test_coverage_names_what_was_reached_and_what_was_not() -> None:
    result = check(WINDOWED, Bounds(sessions=2, messages=2, restarts=1, depth=6, trees=1,
                                   external=0))
    coverage = result.coverage
    assert {"recipient_resolution", "self_send", "invalid_arguments", "invalid_body",
            "inflight_full"} <= coverage.guards
    # Two sessions cannot fill an inbox (one sender meets the pair window first), and
    # parent and child trust each other; a restart may turn messaging off.
    assert {"inbox_full", "permission"} <= set(coverage.missing_guards())
    assert "disabled" in coverage.guards
    line = coverage.line()
    assert f"guards {len(coverage.guards)}/{len(ALL_GUARDS)} reached" in line
    assert "inbox_full" in line
    assert ("MessageLifecycle", MessageState.CLAIMED, "consume") in coverage.transitions
    # Parent and child never ask, so no call is held: the approval machine's transitions are
    # counted in the whole, and named as not taken, as are the scopes never granted.
    assert set(APPROVAL_STEPS) <= ALL_TRANSITIONS
    assert not set(APPROVAL_STEPS) & coverage.transitions
    assert f"transitions {len(coverage.transitions)}/{len(ALL_TRANSITIONS)} taken" in line
    assert "ApprovalLifecycle.pending--approve" in line and "approve tree" in line
    assert not coverage.complete


def test_approvals_are_answered_in_every_scope_and_counted() -> None:
    """Two siblings ask before writing to each other: their held calls are approved in every
    grant scope and denied, and the approval machine's transitions are counted with the
    others (``tests/deep/test_check_coverage.py``: everything, at the default bounds)."""
    bounds = Bounds(sessions=3, messages=2, restarts=0, depth=6, disabled=0, trees=1, external=0)
    result = check(checker.DEFAULT_CONFIG, bounds)
    assert result.counterexample is None
    coverage = result.coverage
    assert set(APPROVAL_STEPS) <= coverage.transitions
    assert coverage.scopes == set(ALL_SCOPES)
    assert "approval scopes 3/3 granted" in coverage.line()
    assert result.outcomes[ApprovalRequired.code] > 0  # calls held, then answered


def test_a_reused_call_id_with_other_arguments_is_caught() -> None:
    with planted("digest-ignored"):  # the reused id is taken for a retry: replayed
        found = check(WINDOWED, SMALL).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert IdempotencyConflict.code in found.detail
    assert found.trace[-1].endswith("reused call id)")


@pytest.mark.parametrize(("plant", "last"), [
    ("producer-key-forgotten", "retry)"),  # the retry is accepted anew: delivered twice
    ("producer-digest-ignored", "reused)"),  # the other mail is taken for a retry: lost
])
def test_a_producer_key_bug_is_caught(plant: str, last: str) -> None:
    with planted(plant):
        found = check(WINDOWED, SMALL).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert "key k1" in found.trace[-1] and found.trace[-1].endswith(last)


def test_a_give_up_that_wakes_the_session_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A give-up leaves the session idle with its mail (only new input wakes it); a
    give-up that wakes it like a cancel answers alike but leaves another state."""
    original = runs.end

    def end(*args: Any, wake: bool = True, **rest: Any) -> Any:
        del wake
        return original(*args, wake=True, **rest)

    monkeypatch.setattr(runs, "end", end)
    found = check(WINDOWED, SMALL).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert len(found.trace) == 3  # create, mail wakes the root, give up its queued run
    assert found.trace[-1].startswith("give_up_run(")


def test_a_user_steer_that_never_joins_is_caught() -> None:
    """User steering joins the running run; the shortest trace steers a running session
    (agent steer sends need a second running session, one step more)."""
    with planted("steer-never-joins"):
        found = check(WINDOWED, SMALL).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert len(found.trace) == 4  # create, delegate, start the child, steer it
    assert found.trace[-1].startswith("steer(")


def test_a_restart_may_turn_messaging_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `disabled` guard answers only under a config with messaging off: the search
    restarts into one, and a send the engine lets through there is caught."""
    monkeypatch.setattr(sending, "check_enabled", lambda config: None)
    found = check(WINDOWED, attrs.evolve(SMALL, disabled=1)).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert MessagingDisabled.code in found.detail
    assert any("enabled = false" in label for label in found.trace)
    assert found.trace[-1].startswith("send_message(")


def test_a_handle_looked_up_in_another_tree_is_caught() -> None:
    with planted("handle-across-trees"):
        found = check(WINDOWED, attrs.evolve(SMALL, trees=2, restarts=0)).counterexample
    assert found is not None and found.invariant == "AGREE"
    assert len(found.trace) == 5  # two roots, mail wakes one, it runs, names the other
    assert found.trace[-1].endswith("other tree's handle)")


def test_the_ledger_carries_what_the_feed_said_before_the_drain() -> None:
    """A drain reads only the feed after its state's ledger: a consume logged twice before
    the drain began must still be found, from the ledger."""
    store, ids = MemoryStore(), CountingIds()
    engine = Engine(store, ids, WINDOWED)
    root = engine.create_root(AgentSpec("worker")).session_id
    engine.accept(root, "note", Owner.USER)
    run = engine.start_run(root).run_id
    request = engine.begin_request(root, run).request_id
    engine.commit_request(root, run, request)
    with store.read() as tx:
        consumed = next(e for _, e in tx.feed() if e.kind == EventKind.PRODUCER_MESSAGE_CONSUMED)
        assert settled(tx) is None
    store.transact(lambda tx: tx.append(root, consumed.kind, consumed.data))  # logged twice
    with store.read() as tx:
        whole = Ledger().then(tx.feed())
        assert whole.upto == tx.feed_end()
        for ledger in (Ledger(), Ledger().then(list(tx.feed())[:-1]), whole):
            found = settled(tx, ledger)
            assert found is not None and found[0] == "INV1"


# Plants only the newer actions reach, each with the smallest bounds that reach it (one
# tree, no restart) and how its shortest trace ends: a mode-only retry, a late call of an
# ended run, a session-scoped approval, a revert, a cousin (four sessions in one tree).
ONE_TREE = Bounds(sessions=3, messages=3, restarts=0, disabled=0, trees=1, depth=8, external=0)
CHECKER_HUNTED: dict[str, tuple[Bounds, int, str]] = {
    "mode-retry-replays": (SMALL, 5, "reused call id, other mode)"),
    "rule-before-liveness": (attrs.evolve(ONE_TREE, depth=5), 5, "from the ended run)"),
    "session-grant-for-tree": (ONE_TREE, 8, " steer)"),
    "revert-spares-descendants": (attrs.evolve(ONE_TREE, depth=4), 4, "revert(#2)"),
    "cousin-as-sibling": (attrs.evolve(ONE_TREE, sessions=4, messages=4, depth=6), 6,
                          " steer)"),
    # create, attach an external child, mail to it, its check_mail (which consumed)
    "consume-at-claim": (attrs.evolve(ONE_TREE, external=1, depth=4), 4,
                         "external_check(#2)"),
    # The child sends to the root, whose run starts and claims it; the child recalls it.
    "cancel-claimed": (SMALL, 7, "claimed)"),
}


@pytest.mark.parametrize("plant", sorted(CHECKER_HUNTED))
def test_a_bug_only_the_newer_actions_reach_is_caught(plant: str) -> None:
    bounds, length, last = CHECKER_HUNTED[plant]
    with planted(plant):
        found = check(WINDOWED, bounds).counterexample
    assert found is not None and found.invariant == "AGREE", plant
    assert len(found.trace) == length and found.trace[-1].endswith(last), found.trace


def test_every_checker_hunted_plant_is_registered() -> None:
    assert set(CHECKER_HUNTED) <= set(PLANTS)


def test_the_mode_only_retry_and_the_ended_run_are_refused_unplanted() -> None:
    """Both answer the typed refusal, which the search counts among its outcomes."""
    result = check(WINDOWED, attrs.evolve(ONE_TREE, depth=5))
    assert result.counterexample is None
    for code in (IdempotencyConflict.code, InvalidToolContext.code):
        assert result.outcomes.get(code, 0) > 0, code


def test_the_default_bounds_reach_a_cousin() -> None:
    """A cousin needs four sessions in one tree: root, two children, a grandchild."""
    assert Bounds().sessions >= 4


def _named(made: Any, field: str) -> str:
    """The id of what either side made: the engine answers records, the model ids."""
    return made if isinstance(made, str) else str(getattr(made, field))


def test_a_held_call_approved_after_its_run_ended_agrees() -> None:
    """The engine sends a held call once it is approved, even if its run has ended since
    (approved=True skips the liveness check); the model says the same, in every scope."""
    asking = AgentSpec("asking", "", Rules.of({"parent": "allow", "sibling": "ask", "*": "deny"}))
    for scope in ("once", "session", "tree"):
        answers = []
        for side in (Engine(MemoryStore(), CountingIds(), WINDOWED),
                     Reference(WINDOWED, CountingIds())):
            root = _named(side.create_root(asking), "session_id")
            kid, other = (_named(side.delegate(root, asking, "task"), "session_id")
                          for _ in range(2))
            run = _named(side.start_run(kid), "run_id")
            ctx = ToolContext(kid, run, "t1")
            arguments = {"to": other, "body": "hi", "mode": "queue"}
            held = side.hold_for_approval(ctx, "send_message", arguments, "sibling")
            side.finish_run(kid, run, "done")
            answers.append(outcome(functools.partial(side.answer_approval, held.approval_id,
                                                     True, scope)))
        assert answers[0] == answers[1] and answers[0][0] == "ok", answers
        assert answers[0][1][3] and "message_id" in answers[0][1][3]


LMDB_BOUNDS = Bounds(sessions=2, messages=2, restarts=1, depth=3, disabled=0, trees=1,
                     external=0)


def test_the_lmdb_mode_agrees_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--store", "lmdb", "--quiet",
                 "--bounds", "sessions=2,messages=2,restarts=1,depth=3,disabled=0,trees=1"]) == 0
    assert "also run on the lmdb store" in capsys.readouterr().out


def test_the_lmdb_mode_runs_the_engine_on_lmdb(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the LMDB store alone (a scan that stops one row early) is invisible to the
    memory search and caught when every transition also runs on LMDB."""
    original = LmdbTables.scan

    def scan(self: LmdbTables, table: Any, prefix: bytes, start: bytes = b"") -> Any:
        rows = original(self, table, prefix, start)
        return rows[:-1] if len(rows) > 1 else rows

    monkeypatch.setattr(LmdbTables, "scan", scan)
    assert check(WINDOWED, LMDB_BOUNDS).counterexample is None
    found = check(WINDOWED, LMDB_BOUNDS, store=_scratch_lmdb).counterexample
    assert found is not None and found.invariant == "AGREE", found


def test_the_external_boundary_is_searched_and_reported() -> None:
    """With an external session in the bounds, the search takes every step of its boundary
    (check_mail claims or is refused while claimed; the next call consumes; a connection's
    end releases; a call opens a turn) against the model, and the coverage line says so."""
    result = check(WINDOWED, attrs.evolve(ONE_TREE, external=1, depth=5))
    assert result.counterexample is None
    assert result.coverage.boundary == set(BOUNDARY)
    assert f"external boundary {len(BOUNDARY)}/{len(BOUNDARY)}" in result.coverage.line()
    # Without one, the line has no external part.
    assert "external" not in check(WINDOWED, attrs.evolve(ONE_TREE, depth=3)).coverage.line()


def test_an_external_sessions_released_mail_expires_alike() -> None:
    """With expiry on, mail an external session's check_mail claimed and its connection's end
    released keeps its clock on both sides, so a late sweep expires it on both. The engine's
    side once ran the boundary without the instant and TTL the daemon passes: the claim forgot
    the clock, and the engine found nothing stale where the model expired the mail (the
    default search at depth 9 with an external session found it, eight actions deep)."""
    bounds = Bounds(sessions=2, messages=2, restarts=0, approvals=0, disabled=0, trees=1,
                    external=1, depth=8)
    result = check(checker.DEFAULT_CONFIG, bounds)
    assert result.counterexample is None, result.counterexample
    assert ("MessageLifecycle", MessageState.RELEASED, "expire") in result.coverage.transitions


def test_the_checker_takes_the_recall_and_expiry_transitions() -> None:
    """With expiry on (the default config's TTL), the sender's cancel and the late sweep's
    expiry are among the transitions the search takes, and the engine agrees throughout."""
    result = check(checker.DEFAULT_CONFIG,
                   Bounds(sessions=2, messages=2, restarts=1, depth=6, trees=1, external=0))
    assert result.counterexample is None
    assert {("MessageLifecycle", MessageState.ADMITTED, "cancel"),
            ("MessageLifecycle", MessageState.ADMITTED, "expire")} <= result.coverage.transitions
    assert "MessageLifecycle.accepted--cancel" in result.coverage.line()  # not yet reached
