"""The drain: from any state, the engine's own steps until every session is quiet.

A drain runs the engine alone (no sends, no discards): the last created busy session starts,
commits its open request, claims its waiting mail, or finishes its run, until none is busy;
then every message accepted must have been settled (``invariants.settled``).
"""

from __future__ import annotations

from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.store import ReadTxn
from treemail.models.actions import Action, Move, mail_owner, short

__all__ = ["drain_move", "drain_step", "labelled"]


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
        if session.state == _QUEUED:
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
            return "accept", (session.session_id, mail_owner(session))
    return None


# Members read once (under Python 3.11 a read through the class costs ten globals' reads).
_QUEUED = SessionState.QUEUED
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

