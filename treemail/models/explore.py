"""The model checker's alphabet: every action enabled in a state, and how to run it.

An ``Action`` is data (a kind, its arguments and a printable label). ``perform`` runs it on
either side, an ``Engine`` or the ``Reference`` model: both offer the same operations with the
same signatures, so one call serves both and ``outcome`` reduces the two answers to values that
compare (the value, or the error code). ``alphabet`` reads the model's world, which is the
oracle: the engine must agree with it on every action, enabled or refused.

The alphabet is finite and deterministic for a given state: the same state (up to id
numbering) always yields the same actions in the same order, which keeps the search and its
shortest counterexamples reproducible.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from treemail.core import external
from treemail.core.clock import ManualClock
from treemail.core.engine import Engine, Request
from treemail.core.errors import ApprovalRequired, TreemailError
from treemail.core.lifecycle import ApprovalState, MessageState, RunState, SessionState
from treemail.core.permissions import Rules
from treemail.core.receipts import Receipt
from treemail.core.records import AgentSpec, GrantScope, Mode, Owner, Run, Session, ToolContext
from treemail.core.results import CallOutcome
from treemail.core.store import ReadTxn
from treemail.models.reference import Reference
from treemail.models.world import FINAL, MessageRecord, SessionRecord, World

__all__ = [
    "ASKING",
    "LISTENING",
    "TRUSTING",
    "Action",
    "Bounds",
    "alphabet",
    "drain_move",
    "drain_step",
    "ended_run",
    "labelled",
    "outcome",
    "perform",
    "perform_move",
    "short",
]

# Every agent trusts every peer, so no call is ever held for approval...
TRUSTING = AgentSpec("worker", "does the work", Rules.of({"*": "allow"}))
# ...unless approvals are in the bounds: then siblings ask before writing to each other and
# the rest of the tree (a grandparent, say) is denied, so allow, ask and deny all occur.
# Parent and child write freely, so two children can fill their parent's inbox (the cap
# needs two senders: the pair window stops one sender first) and mail can be relayed past
# the hop limit.
ASKING = AgentSpec("worker", "does the work",
                   Rules.of({"parent": "allow", "child": "allow", "sibling": "ask", "*": "deny"}))
# With approvals in the bounds, a grandchild's agent has no message rules: send_message is
# hidden from it, so the mail it reads carries no reply hint, and its own sends are denied.
LISTENING = AgentSpec("listener", "reads its mail, never writes", Rules())
UNKNOWN_HANDLE = "nobody_00000000"
KEY = "k1"  # the idempotency key of the user's keyed mail


@attrs.frozen
class Bounds:
    """How far the search goes. Successors beyond a size bound are checked, not explored."""

    # Including the roots. Four, so that one tree holds a cousin (root, two children, a
    # grandchild): the wildcard's rule between two delegated sessions of different parents.
    sessions: int = 4
    messages: int = 4  # accepted, of every owner: two tasks and two sends fill an inbox
    restarts: int = 1
    approvals: int = 1  # held calls; 0: every agent allows every peer, nothing is ever held
    # Actions from the empty world. Within the other defaults every send guard and every
    # lifecycle transition is reached by depth 8 (the hop limit and the inbox cap last: a
    # relay of relayed mail, two children filling their parent's inbox); each level is
    # about four times the last.
    depth: int = 8
    # 1: a restart may also bring the engine back with messaging turned off, the one way the
    # `disabled` guard answers; 0: every restart keeps the config.
    disabled: int = 1
    # 2: a second root too, counted among the sessions; a send may name the other tree's
    # root by its handle, which no tree but its own resolves. 1 by default: the four
    # sessions go to one tree, where the cousin is (the other tree's handle has its test).
    # So bounded, the defaults explore 196,789 states (depth 8, every guard and transition;
    # 177,569 before recall and the late expiry sweep) against 166,404 for three sessions in
    # two trees before the newer actions. Depth 9 would
    # be about 900,000 (6,746 states at depth 6, so each level about five times the last) in
    # about 1,600 CPU s: over five minutes even on two idle cores (``parallel``), since a
    # state costs what the engine's own operations cost (two thirds of the profile); so the
    # default depth stays 8 (328 CPU s in one process: under three minutes for each of two
    # workers, plus the exchange's few per cent).
    trees: int = 1
    # External sessions attached (MCP clients' sessions, spec/external.md): check_mail
    # claims, the client's next call consumes, its connection's end releases, a call opens a
    # turn. 0 by default, so the default search is the hosted one whose size is pinned.
    external: int = 0

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(Bounds):
            if getattr(self, field.name) < 0:
                raise ValueError(f"bound {field.name} must be >= 0")

    @property
    def agent(self) -> AgentSpec:
        return ASKING if self.approvals else TRUSTING

    def agent_below(self, parent: SessionRecord) -> AgentSpec:
        """The agent of a child delegated by ``parent``."""
        return LISTENING if self.approvals and parent.parent_session_id is not None \
            else self.agent


@attrs.frozen
class Action:
    kind: str
    args: tuple[Any, ...]
    label: str


@functools.lru_cache(maxsize=4096)  # every label names ids, and the same few ids recur
def short(some_id: str | None) -> str:
    """``#7`` for the CountingIds id numbered 7: traces stay readable."""
    if some_id is None:
        return "-"
    head = some_id.split("-", 1)[0]
    return f"#{int(head, 16)}" if len(head) == 8 else some_id


def _send(target: Any, ctx: ToolContext, arguments: dict[str, str], hold: bool) -> Any:
    """send_message; a call an ask rule stops is held for the user, as the runtime does."""
    try:
        return target.send_message(ctx, arguments)
    except ApprovalRequired as asked:
        if hold:
            label = str(asked.details.get("label", "*"))
            target.hold_for_approval(ctx, "send_message", arguments, label)
        raise


def _restart(target: Any, messaging: bool = True) -> Any:
    """The process dies: a new engine opens the same store and recovers it; with
    ``messaging`` false, under a config that turns messaging off ([messaging] enabled =
    false), which holds from then on (the checker keeps it in the state)."""
    config = target.config if messaging else attrs.evolve(target.config, enabled=False)
    if isinstance(target, Reference):
        target.config = config
        return target.restart()
    return Engine(target.store, target.ids, config).recover()


_CALLS: dict[str, Callable[..., Any]] = {
    "create_root": lambda t, agent: t.create_root(agent),
    "delegate": lambda t, parent, agent: t.delegate(parent, agent, "task"),
    "accept": lambda t, to, owner, key=None, body="note": t.accept(to, body, owner, key=key),
    "steer": lambda t, to, owner: t.accept(to, "steer", owner, mode=Mode.STEER),
    "start_run": lambda t, sid: t.start_run(sid),
    "begin_request": lambda t, sid, rid: t.begin_request(sid, rid),
    "commit_request": lambda t, sid, rid, req: t.commit_request(sid, rid, req),
    "abort_request": lambda t, sid, rid, req: t.abort_request(sid, rid, req),
    "finish_run": lambda t, sid, rid: t.finish_run(sid, rid, "done"),
    "cancel_run": lambda t, sid, rid: t.cancel_run(sid, rid, "user cancelled"),
    "give_up_run": lambda t, sid, rid: t.give_up_run(sid, rid, "model failed 3 times"),
    "send_message": _send,
    "discard": lambda t, mid: t.discard(mid, "operator decision"),
    "restart": _restart,
    "answer_approval": lambda t, aid, approve, scope=GrantScope.ONCE: t.answer_approval(
        aid, approve, scope),
    "revert": lambda t, sid: t.revert(sid),
    "cancel_message": lambda t, sid, mid: t.cancel_message(sid, mid),
    "expire_mail": lambda t, sid: _late(t, lambda: t.expire_mail(sid)),
}

# The instant a late sweep reads: past any TTL, for mail stamped at the clock's start (the
# search's clock stands still, so every stamp is 0 and only this sweep finds mail stale).
LATE = 1e9


def _late(target: Any, sweep: Callable[[], Any]) -> Any:
    """Run ``sweep`` with the target's clock at ``LATE``, then put the clock back: the
    engine is made anew for every step, but the model lives on in its state."""
    kept = target.clock
    target.clock = ManualClock(LATE)
    try:
        return sweep()
    finally:
        target.clock = kept


# A token's random part: the model keeps no tokens, the engine's are not compared.
_SECRET = "s" * 43


def _attach(target: Any, parent: str, agent: AgentSpec) -> Any:
    if isinstance(target, Reference):
        return target.attach(parent, agent)
    session, _ = target.attach(parent, agent, _SECRET)
    return session


# The external boundary on the engine's side is the core's, run in one transaction as the
# daemon runs it (``adapters/daemon/external.py``); the model has a method for each.
def _external_check(target: Any, sid: str) -> Any:
    if isinstance(target, Reference):
        return target.external_check(sid)
    return target.store.transact(
        lambda tx: external.check_mail(tx, target.ids, sid, target.agents))


def _external_settle(target: Any, sid: str, rid: str, req: str, committed: bool) -> Any:
    if isinstance(target, Reference):
        return target.external_settle(sid, rid, req, committed)
    return target.store.transact(lambda tx: external.settle(tx, sid, rid, req, committed))


def _external_turn_run(target: Any, sid: str) -> Any:
    if isinstance(target, Reference):
        return target.external_turn_run(sid)
    return target.store.transact(lambda tx: external.turn_run(tx, target.ids, sid))


_CALLS.update({
    "attach": _attach,
    "external_check": _external_check,
    "external_settle": _external_settle,
    "external_turn_run": _external_turn_run,
})


def perform(action: Action, target: Engine | Reference) -> Any:
    return _CALLS[action.kind](target, *action.args)


def _normal(value: Any) -> Any:
    """Engine answers (records) reduced to the model's shapes (ids and tuples)."""
    if isinstance(value, Session):
        return value.session_id
    if isinstance(value, Run):
        return value.run_id
    if isinstance(value, Receipt):
        return value.message_id, value.recipient, str(value.state), value.reason
    if isinstance(value, Request):
        return (value.request_id, value.run_id,
                tuple((d.message_id, d.owner, d.text) for d in value.deliveries))
    if hasattr(value, "approval_id"):
        outcome = value.outcome
        if isinstance(outcome, CallOutcome):  # the model keeps only the error's code
            outcome = {k: v for k, v in outcome.as_result().items() if k != "message"}
        return (value.approval_id, str(value.state), value.scope, outcome)
    return value


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """("ok", value) or ("error", code, candidates); any other exception is a crash."""
    try:
        return ("ok", _normal(call()))
    except TreemailError as exc:
        found = exc.details.get("candidates")
        return ("error", exc.code, tuple(found) if isinstance(found, list | tuple) else ())
    except Exception as exc:  # a crash on either side is a disagreement, reported as such
        return ("crash", f"{type(exc).__name__}: {exc}")


# -- the alphabet -------------------------------------------------------------------------------


def alphabet(model: Reference, bounds: Bounds, restarts: int) -> list[Action]:
    world = model.world
    if not world.sessions:
        return [Action("create_root", (bounds.agent,), "create_root()")]
    actions: list[Action] = []
    roots = sum(1 for s in world.sessions.values() if s.parent_session_id is None)
    if roots < bounds.trees and len(world.sessions) < bounds.sessions:
        actions.append(Action("create_root", (bounds.agent,), "create_root(another tree)"))
    for session in world.sessions.values():
        actions += _outside(world, session, bounds)
        actions += _keyed(world, session, bounds)
        actions += (_boundary(world, session) if session.external
                    else _run_actions(world, session))
        actions += _attach_actions(world, session, bounds)
        actions += _sends(world, session)
        actions += _ended_sends(world, session)
        actions += _revert(world, session)
    for message in world.messages.values():
        if message.state not in FINAL:  # claimed ones too: the refusal must agree
            mid = message.message_id
            actions.append(Action("discard", (mid,), f"discard({short(mid)}, {message.state})"))
            actions += _recall(message)
    actions += _expiries(model)
    if restarts < bounds.restarts:
        actions += _restarts(model, bounds)
    actions += _answers(world)
    return actions


def _recall(message: MessageRecord) -> list[Action]:
    """The sender cancels its pending agent mail; claimed mail too, where it is too late."""
    if message.owner is not Owner.AGENT or message.sender is None:
        return []
    mid = message.message_id
    return [Action("cancel_message", (message.sender, mid),
                   f"cancel_message({short(message.sender)}, {short(mid)}, {message.state})")]


def _expiries(model: Reference) -> list[Action]:
    """With expiry on, a late sweep of each session that holds unclaimed agent mail."""
    if model.config.message_ttl_seconds <= 0:
        return []
    due = sorted({m.recipient for m in model.world.messages.values()
                  if m.owner is Owner.AGENT and m.state in _UNCLAIMED})
    return [Action("expire_mail", (sid,), f"expire_mail({short(sid)}, late)") for sid in due]


_UNCLAIMED = (MessageState.ACCEPTED, MessageState.ADMITTED, MessageState.RELEASED)


def _answers(world: World) -> list[Action]:
    """Every pending approval answered, in every scope: a session or tree grant lets later
    calls through unasked."""
    actions = []
    for approval in world.approvals.values():
        if approval.state is ApprovalState.PENDING:
            for approve, scope in (*((True, s) for s in GrantScope), (False, GrantScope.ONCE)):
                word = f"approve {scope}" if approve else "deny"
                label = f"answer_approval({_approval_label(approval.approval_id)}, {word})"
                actions.append(Action("answer_approval",
                                      (approval.approval_id, approve, scope), label))
    return actions


def _revert(world: World, session: SessionRecord) -> list[Action]:
    """A delegated branch reverted: it and its descendants become ghosts, reachable by UUID
    only. (Reverting a root is the same walk from the top of its own tree.) One revert per
    path: a second doubles the space again and walks the same code."""
    if session.parent_session_id is None or not all(s.live for s in world.sessions.values()):
        return []
    sid = session.session_id
    return [Action("revert", (sid,), f"revert({short(sid)})")]


def _restarts(model: Reference, bounds: Bounds) -> list[Action]:
    actions = [Action("restart", (), "restart (new engine over the store + recover)")]
    if bounds.disabled and model.config.enabled:
        actions.append(Action("restart", (False,), "restart with [messaging] enabled = false "
                                                    "(new engine + recover)"))
    return actions


def _outside(world: World, session: SessionRecord, bounds: Bounds) -> list[Action]:
    """Delegation and outside mail; only within the bounds, since both always accept."""
    if len(world.messages) >= bounds.messages:
        return []
    sid = session.session_id
    actions = []
    # At most two children each: two are siblings, and beside a grandchild make a cousin; a
    # third child is one more sibling, and four sessions would spend most of the space on
    # the star of three.
    children = sum(1 for s in world.sessions.values() if s.parent_session_id == sid)
    if len(world.sessions) < bounds.sessions and children < 2 and not session.external:
        actions.append(Action("delegate", (sid, bounds.agent_below(session)),
                              f"delegate(parent={short(sid)})"))
    actions.append(_accept(session))
    # Steering differs from queued mail only while a run is in flight (it joins that run):
    # to a session without one it waits for the next run like any other mail.
    if session.state == SessionState.RUNNING:
        owner = _owner(session)
        actions.append(Action("steer", (sid, owner), f"steer({owner.value} -> {short(sid)})"))
    return actions


def _keyed(world: World, session: SessionRecord, bounds: Bounds) -> list[Action]:
    """The user's keyed mail to a root: once, then its retry (answered with the first
    message id, nothing written) and the key reused for other mail (refused). One key per
    root keeps the space small; the retries change nothing, so they add no state."""
    if session.parent_session_id is not None:
        return []
    sid, owner = session.session_id, Owner.USER
    label = f"accept(user mail -> {short(sid)}, key {KEY}"
    if (sid, owner, KEY) not in world.produced:
        if len(world.messages) >= bounds.messages:
            return []
        return [Action("accept", (sid, owner, KEY), f"{label})")]
    return [Action("accept", (sid, owner, KEY), f"{label} retry)"),
            Action("accept", (sid, owner, KEY, "other note"), f"{label} reused)")]


def _owner(session: SessionRecord | Session) -> Owner:
    """The user talks to the root, plugins to the others: the engine treats both owners alike
    (outside mail, never capped), so one owner per session keeps the space small."""
    return Owner.USER if session.parent_session_id is None else Owner.PLUGIN


def _accept(session: SessionRecord | Session) -> Action:
    owner, sid = _owner(session), session.session_id
    return Action("accept", (sid, owner), f"accept({owner.value} mail -> {short(sid)})")


def _approval_label(approval_id: str) -> str:
    return "/".join(short(part) if "-" in part else part for part in approval_id.split("/"))


def _run_actions(world: World, session: SessionRecord) -> list[Action]:
    sid, rid = session.session_id, session.run_id
    if rid is None:
        return []
    at = f"{short(sid)}, run {short(rid)}"
    give_up = Action("give_up_run", (sid, rid), f"give_up_run({at})")
    if session.state == SessionState.QUEUED:
        return [Action("start_run", (sid,), f"start_run({short(sid)})"),
                Action("cancel_run", (sid, rid), f"cancel_run({at})"), give_up]
    request = world.runs[rid].open_request
    actions = [Action("finish_run", (sid, rid), f"finish_run({at}, result)"),
               Action("cancel_run", (sid, rid), f"cancel_run({at})"), give_up]
    if request is None:
        actions.insert(0, Action("begin_request", (sid, rid), f"begin_request({at})"))
    else:
        req = f"{at}, request {short(request)}"
        actions[:0] = [Action("commit_request", (sid, rid, request), f"commit_request({req})"),
                       Action("abort_request", (sid, rid, request), f"abort_request({req})")]
    return actions


def _attach_actions(world: World, parent: SessionRecord, bounds: Bounds) -> list[Action]:
    """An external child of a root, while the bounds allow one more."""
    attached = sum(1 for s in world.sessions.values() if s.external)
    if (parent.parent_session_id is not None or attached >= bounds.external
            or len(world.sessions) >= bounds.sessions):
        return []
    sid = parent.session_id
    return [Action("attach", (sid, bounds.agent), f"attach(external, parent={short(sid)})")]


def _boundary(world: World, session: SessionRecord) -> list[Action]:
    """An external session's client: it checks its mail (claims; refused while a claim is
    held, as from a second connection); holding a claim, its next call consumes it or its
    connection ends and releases it; without a turn, a tool call opens one."""
    sid, rid = session.session_id, session.run_id
    actions = [Action("external_check", (sid,), f"external_check({short(sid)})")]
    request = world.runs[rid].open_request if rid is not None else None
    if rid is not None and request is not None:
        at = f"{short(sid)}, run {short(rid)}, request {short(request)}"
        actions += [Action("external_settle", (sid, rid, request, True),
                           f"external_settle({at}, next call: consumed)"),
                    Action("external_settle", (sid, rid, request, False),
                           f"external_settle({at}, connection ended: released)")]
    if session.state != SessionState.RUNNING:
        actions.append(Action("external_turn_run", (sid,), f"external_turn_run({short(sid)})"))
    return actions


def _sends(world: World, sender: SessionRecord) -> list[Action]:
    """From a running run: to every live peer in both modes; then the hostile forms: a
    self-send, an unknown handle, a stray argument, a blank body, and a retry of the run's
    last accepted call, exact and with another body."""
    if sender.state != SessionState.RUNNING or sender.run_id is None:
        return []
    sid, rid = sender.session_id, sender.run_id
    calls = {k[2] for k in world.results if k[:2] == (sid, rid)}
    calls |= {a.tool_call_id for a in world.approvals.values() if a.run_id == rid}
    fresh = ToolContext(sid, rid, f"t{len(calls) + 1}")
    peers = [p for p in world.sessions.values()
             if p.root_session_id == sender.root_session_id and p is not sender and p.live]
    actions = []
    for peer in peers:
        for mode in ("steer", "queue"):
            args = {"to": peer.reference, "body": "hi", "mode": mode}
            actions.append(_send_action(fresh, args, f"-> {short(peer.session_id)} {mode}"))
    strangers = [(s.reference, "other tree's handle") for s in world.sessions.values()
                 if s.root_session_id != sender.root_session_id and s.parent_session_id is None]
    for to, what in ((sender.reference, "self-send"), (UNKNOWN_HANDLE, "unknown handle"),
                     *strangers):
        actions.append(_send_action(fresh, {"to": to, "body": "hi"}, what))
    if peers:  # arguments the first guards refuse: a stray field, and a blank body
        to = peers[0].reference
        actions.append(_send_action(fresh, {"to": to, "body": "hi", "cc": to}, "stray field"))
        actions.append(_send_action(fresh, {"to": to, "body": " "}, "blank body"))
    if calls:
        last = max(calls, key=lambda call: (len(call), call))
        original = world.calls.get((sid, rid, last))
        if original is not None:
            to, body, mode = original
            retry = ToolContext(sid, rid, last)
            actions.append(_send_action(retry, {"to": to, "body": body, "mode": mode.value},
                                        "retry"))
            # The same call id with other arguments: a conflict, never a replay; the mode
            # alone differing is other arguments too.
            actions.append(_send_action(retry, {"to": to, "body": body + "!",
                                                "mode": mode.value}, "reused call id"))
            other = "queue" if mode.value == "steer" else "steer"
            actions.append(_send_action(retry, {"to": to, "body": body, "mode": other},
                                        "reused call id, other mode"))
    return actions


def ended_run(world: World, session: SessionRecord) -> str | None:
    """The latest run of a session without one that has ended (finished or interrupted),
    if any. Only a session at rest sends from an ended run: a finished session always has
    one, an idle one has one unless it never ran, so the canonical form tells states apart
    by it for idle sessions alone (every session's past runs would double the space)."""
    if session.state not in (SessionState.IDLE, SessionState.FINISHED):
        return None
    ended = [r for r in world.runs.values() if r.session_id == session.session_id
             and r.status in (RunState.FINISHED, RunState.INTERRUPTED)]
    return max(ended, key=lambda r: r.number).run_id if ended else None


def _ended_sends(world: World, sender: SessionRecord) -> list[Action]:
    """A fresh call from a run that has ended (a late tool call of a finished or cancelled
    run): refused with invalid_tool_context whatever the rule for the recipient, so one
    send to every live peer of the tree (the rules allow, ask and deny among them)."""
    rid = ended_run(world, sender)
    if rid is None:
        return []
    calls = {k[2] for k in world.results if k[:2] == (sender.session_id, rid)}
    calls |= {a.tool_call_id for a in world.approvals.values() if a.run_id == rid}
    ctx = ToolContext(sender.session_id, rid, f"t{len(calls) + 1}")
    return [_send_action(ctx, {"to": peer.reference, "body": "hi", "mode": "queue"},
                         f"-> {short(peer.session_id)} from the ended run")
            for peer in world.sessions.values()
            if peer.root_session_id == sender.root_session_id and peer is not sender
            and peer.live]


def _send_action(ctx: ToolContext, arguments: Mapping[str, str], what: str) -> Action:
    label = f"send_message({short(ctx.session_id)}, run {short(ctx.run_id)}, {ctx.tool_call_id}"
    return Action("send_message", (ctx, dict(arguments), True), f"{label} {what})")


Move = tuple[str, tuple[Any, ...]]  # an action's kind and arguments, without its label


def drain_step(tx: ReadTxn) -> Action | None:
    """The next step of a drain of the engine's store (no sends, no discards), or None once
    every session is quiet and holds no mail: the last created busy session starts, commits
    its open request, claims its waiting mail, or finishes its run. Children go before their
    parents, so a child's result is in its parent's mail before the parent's run takes it:
    the parent runs once, not once more per result (a quarter fewer drain steps than
    parents first)."""
    move = drain_move(tx)
    return None if move is None else labelled(move)


def drain_move(tx: ReadTxn) -> Move | None:
    """``drain_step`` without the label: a drain takes millions of steps, and only a failed
    one is ever printed (``labelled`` names it then)."""
    sessions = list(tx.sessions())
    for session in reversed(sessions):
        # The state first: most sessions are at rest, and then their run is not read.
        if session.state not in _BUSY:
            continue
        sid, rid = session.session_id, session.run_id
        run = tx.run(rid) if rid is not None else None
        if run is None:
            continue
        if session.state == SessionState.QUEUED:
            return "start_run", (sid,)
        if run.open_request is not None:
            return "commit_request", (sid, rid, run.open_request)
        for m in tx.pending(sid):
            if m.run_id == rid and m.state in _CLAIMABLE:
                return "begin_request", (sid, rid)
        return "finish_run", (sid, rid)
    # Nothing runs. A session a give-up left idle keeps its mail until new input wakes it:
    # it is given some, as a user would (the same action the search offers it).
    for session in sessions:
        if next(iter(tx.pending(session.session_id)), None) is not None:
            return "accept", (session.session_id, _owner(session))
    return None


_BUSY = (SessionState.QUEUED, SessionState.RUNNING)
_CLAIMABLE = (MessageState.ADMITTED, MessageState.RELEASED)


def labelled(move: Move) -> Action:
    """A drain's move as the action the search offers, with that action's label."""
    kind, args = move
    if kind == "accept":
        sid, owner = args
        return Action(kind, args, f"accept({owner.value} mail -> {short(sid)})")
    if kind == "start_run":
        return Action(kind, args, f"start_run({short(args[0])})")
    at = f"{short(args[0])}, run {short(args[1])}"
    if kind == "commit_request":
        return Action(kind, args, f"commit_request({at}, request {short(args[2])})")
    if kind == "begin_request":
        return Action(kind, args, f"begin_request({at})")
    return Action(kind, args, f"finish_run({at}, result)")


def perform_move(move: Move, target: Engine | Reference) -> Any:
    """``perform`` of a move."""
    kind, args = move
    return _CALLS[kind](target, *args)
