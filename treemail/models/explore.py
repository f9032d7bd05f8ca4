"""The model checker's alphabet: every action enabled in a state, within the bounds.

``alphabet`` reads the model's world, which is the oracle: the engine must agree with it on
every action, enabled or refused (``actions`` runs an action on either side, ``drain`` the
engine's own steps to quiet). ``Bounds`` says how far the search goes.

The alphabet is finite and deterministic for a given state: the same state (up to id
numbering) always yields the same actions in the same order, which keeps the search and its
shortest counterexamples reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from treemail.core.lifecycle import ApprovalState, MessageState, RunState, SessionState
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, GrantScope, Owner, Session, ToolContext
from treemail.models.actions import Action, mail_owner, short
from treemail.models.reference import Reference
from treemail.models.world import FINAL, MessageRecord, SessionRecord, World

__all__ = [
    "ASKING",
    "LISTENING",
    "TRUSTING",
    "Bounds",
    "alphabet",
    "ended_run",
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
    # Actions from the empty world. Every send guard and every lifecycle transition is
    # reached by depth 8 (the hop limit and the inbox cap last: a relay of relayed mail, two
    # children filling their parent's inbox); the ninth level takes each of them on from
    # more states: it holds four states in five of the search.
    depth: int = 9
    # 1: a restart may also bring the engine back with messaging turned off, the one way the
    # `disabled` guard answers; 0: every restart keeps the config.
    disabled: int = 1
    # 2: a second root too, counted among the sessions; a send may name the other tree's
    # root by its handle, which no tree but its own resolves. 1 by default: the four
    # sessions go to one tree, where the cousin is (the other tree's handle has its test).
    trees: int = 1
    # External sessions attached (MCP clients' sessions, spec/external.md): check_mail
    # claims, the client's next call consumes, its connection's end releases, a call opens a
    # turn. One by default, so the boundary is in every default search, beside the hosted
    # sessions (the root's external child counts among the four).
    #
    # So bounded, the defaults explore 1,946,064 states (``checker.DEFAULT_STATES``;
    # 1,564,022 of them at the depth cap), every guard, transition, grant scope and boundary
    # step: the checker's aim is a million. Measured whole twice on two idle cores: 1,557 s
    # wall and 2,897 CPU s in one, 2,625 s and 4,688 CPU s in the other (672 and 415 states
    # per CPU second: the machine's speed varies; `just bench` line (h) holds the rate
    # against the aim of a million in five minutes). The nearest bounds miss the million or
    # overshoot it more (counted on the model's keys alone): the old defaults (depth 8, no
    # external session) were 196,789 states; an external session about doubles each level
    # (382,042 to depth 8); beside it at depth 8 a fifth message makes 549,128, a fifth
    # session too 644,895, a second held call 553,612, a second restart 404,633; depth 9
    # without it is about 830,000, and with a fifth message about two million. The first
    # whole search at these bounds found the checker's own engine side running the external
    # boundary without the clock the daemon gives it (``actions._external_check``).
    external: int = 1

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
        owner = mail_owner(session)
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



def _accept(session: SessionRecord | Session) -> Action:
    owner, sid = mail_owner(session), session.session_id
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
