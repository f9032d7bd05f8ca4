"""The model checker's actions, and how one runs on either side.

An ``Action`` is data (a kind, its arguments and a printable label). ``perform`` runs it on
either side, an ``Engine`` or the ``Reference`` model: both offer the same operations with the
same signatures, so one call serves both and ``outcome`` reduces the two answers to values that
compare (the value, or the error code). Which actions are enabled in a state is ``explore``'s
alphabet; the drain's steps are ``drain``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs

from treemail.core import external
from treemail.core.clock import ManualClock
from treemail.core.engine import Engine, Request
from treemail.core.errors import ApprovalRequired, TreemailError
from treemail.core.receipts import Receipt
from treemail.core.records import AgentSpec, GrantScope, Mode, Owner, Run, Session
from treemail.core.results import CallOutcome
from treemail.models.reference import Reference
from treemail.models.world import SessionRecord

__all__ = ["Action", "Move", "failed", "mail_owner", "outcome", "perform", "perform_move",
           "short"]

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


def _send(target: Any, ctx: Any, arguments: dict[str, str], hold: bool) -> Any:
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
# daemon runs it (``adapters/daemon/external.py``), with the engine's instant and TTL as the
# daemon passes them: without them a claim and its release forget the mail's clock, and the
# late sweep that follows finds nothing stale (a search at depth 8 with an external session
# found that the model expires it); the model has a method for each.
def _external_check(target: Any, sid: str) -> Any:
    if isinstance(target, Reference):
        return target.external_check(sid)
    return target.store.transact(lambda tx: external.check_mail(
        tx, target.ids, sid, target.agents, target.instant, target.ttl))


def _external_settle(target: Any, sid: str, rid: str, req: str, committed: bool) -> Any:
    if isinstance(target, Reference):
        return target.external_settle(sid, rid, req, committed)
    return target.store.transact(
        lambda tx: external.settle(tx, sid, rid, req, committed, target.instant))


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
    except Exception as exc:  # a crash on either side is a disagreement, reported as such
        return failed(exc)


def failed(exc: Exception) -> tuple[Any, ...]:
    """``outcome`` of a call that raised ``exc``: ("error", code, candidates) for a refusal,
    ("crash", what) for anything else."""
    if isinstance(exc, TreemailError):
        found = exc.details.get("candidates")
        return ("error", exc.code, tuple(found) if isinstance(found, list | tuple) else ())
    return ("crash", f"{type(exc).__name__}: {exc}")


Move = tuple[str, tuple[Any, ...]]  # an action's kind and arguments, without its label


def perform_move(move: Move, target: Engine | Reference) -> Any:
    """``perform`` of a move."""
    kind, args = move
    return _CALLS[kind](target, *args)


def mail_owner(session: SessionRecord | Session) -> Owner:
    """The user talks to the root, plugins to the others: the engine treats both owners alike
    (outside mail, never capped), so one owner per session keeps the space small."""
    return Owner.USER if session.parent_session_id is None else Owner.PLUGIN
