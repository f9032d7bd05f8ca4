"""External sessions: sessions of a tree that no actor hosts, driven by an MCP client.

An external session has what every session has (a handle, a place in its tree, an agent doc
for its rules); what it lacks is an actor. Its runs are the client's turns, and its model
request boundary is the client's tool call:

* ``check_mail`` opens a turn: the run that was open ends, a fresh one starts, and one
  request claims every deliverable message (the mail the client reads now);
* the client's next tool call commits that request (``settle``, committed): the mail is
  consumed, exactly once, and the turn's base hop is the highest hop it read;
* a connection that ends before that next call aborts the request: the mail is released and
  delivered again by the next ``check_mail``.

So an external session goes through the same claim/consume/release lifecycle as a hosted one;
only the boundary differs. ``spec/lifecycle.md`` states the rule.

Identity is a token bound to the session at ``attach`` (or ``issue``): ``tmx.<session
id>.<secret>``. The store keeps only its SHA-256 digest, in a counter (1: live), and the
session's log records its issue and revocation by ``token_id`` (the digest's first 16 hex
digits), so a listing needs no secret. The secret comes in from the caller: the core makes
no random numbers of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import attrs

from treemail.core import events, runs
from treemail.core.errors import (
    ExternalBusy,
    ExternalOnly,
    SessionTokenRevoked,
    SessionTokenUnknown,
    UnknownTarget,
)
from treemail.core.expiry import expire_due
from treemail.core.ids import IdSource, storable
from treemail.core.keys import external_session_counter, external_token_counter, runs_counter
from treemail.core.lifecycle import (
    MessageState,
    RunState,
    RunTrigger,
    SessionState,
    SessionTrigger,
)
from treemail.core.records import Run, Session
from treemail.core.runs import Request, need_session
from treemail.core.sending import AgentCatalogue
from treemail.core.store import ReadTxn, WriteTxn
from treemail.core.transitions import admit_accepted, step_session

__all__ = [
    "CALL_SLOT",
    "TURN_ENDED",
    "TokenInfo",
    "check_mail",
    "digest",
    "is_external",
    "issue",
    "mark",
    "resolve",
    "revoke",
    "settle",
    "tokens",
    "turn_run",
]

_PREFIX = "tmx"
TOKEN_ID_DIGITS = 16

# The reason a turn's run ends when the client opens the next one with check_mail.
TURN_ENDED = "turn ended: the client checked its mail again"

# The replay slot of an external session's tool calls (``ToolContext.replay_slot``): a retry
# of a call finds its first result whatever run it comes in. Its turn's run may have ended in
# between (a daemon restart interrupts it; another check_mail ends it), and a send answered
# from the old run's slot would be stored twice. Run ids are minted UUIDs: never this text.
CALL_SLOT = "external-calls"


@attrs.frozen
class TokenInfo:
    """A token as listings show it: never the token, never its whole digest."""

    token_id: str
    session: Session
    revoked: bool


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def is_external(tx: ReadTxn, session_id: str) -> bool:
    return tx.count(external_session_counter(session_id)) > 0


def mark(tx: WriteTxn, session: Session) -> None:
    """Make ``session`` external: from now on no actor runs it."""
    if not is_external(tx, session.session_id):
        tx.add(external_session_counter(session.session_id), 1)


def issue(tx: WriteTxn, session_id: str, secret: str) -> str:
    """A new token bound to the external session; only its digest is stored."""
    session = need_session(tx, session_id)
    if not is_external(tx, session_id):
        raise ExternalOnly(
            f"session {session.reference} is hosted by the daemon, not external; tokens bind "
            "only sessions made by `treemail attach`", session_id=session_id)
    token = f"{_PREFIX}.{session_id}.{secret}"
    hashed = digest(token)
    tx.add(external_token_counter(hashed), 1)
    events.record(tx, session_id, events.ExternalTokenIssued(hashed[:TOKEN_ID_DIGITS], hashed))
    return token


def resolve(tx: ReadTxn, token: str) -> Session:
    """The external session a live token binds; a typed refusal for any other token."""
    prefix, _, rest = token.partition(".")
    session_id, _, secret = rest.partition(".")
    session = (tx.session(session_id)
               if prefix == _PREFIX and secret and storable(session_id) else None)
    if session is None or not is_external(tx, session_id):
        raise SessionTokenUnknown(
            "this token binds no external session of this daemon (mistyped, cut short, or "
            "made by another data directory); use the token `treemail attach` printed")
    hashed = digest(token)
    if tx.count(external_token_counter(hashed)):
        return session
    if any(issued == hashed and revoked for _, issued, revoked in _issued(tx, session_id)):
        raise SessionTokenRevoked(
            f"this token of {session.reference} was revoked; ask the user for a new one "
            "(`treemail tokens issue`)", token_id=hashed[:TOKEN_ID_DIGITS])
    raise SessionTokenUnknown(
        f"this token is not one issued for {session.reference}; use the token "
        "`treemail attach` printed")


def tokens(tx: ReadTxn, session_id: str | None = None) -> list[TokenInfo]:
    """Every token issued (live and revoked), of one session or of all external ones."""
    sessions = ([need_session(tx, session_id)] if session_id is not None
                else [s for s in tx.sessions() if is_external(tx, s.session_id)])
    return [info for s in sessions for info in _tokens_of(tx, s)]


def _tokens_of(tx: ReadTxn, session: Session) -> Iterator[TokenInfo]:
    return (TokenInfo(token_id, session, revoked)
            for token_id, _, revoked in _issued(tx, session.session_id))


def _issued(tx: ReadTxn, session_id: str) -> list[tuple[str, str, bool]]:
    """(token_id, digest, revoked) of each token issued for the session, in order."""
    revoked = set()
    issued: list[tuple[str, str]] = []
    for _, payload in events.typed(tx.events(session_id)):
        if isinstance(payload, events.ExternalTokenIssued):
            issued.append((payload.token_id, payload.digest))
        elif isinstance(payload, events.ExternalTokenRevoked):
            revoked.add(payload.token_id)
    return [(token_id, hashed, token_id in revoked) for token_id, hashed in issued]


def revoke(tx: WriteTxn, token_id: str) -> TokenInfo:
    """Revoke a token by its id; revoking a revoked token changes nothing."""
    found = [info for info in tokens(tx) if info.token_id == token_id]
    if not found:
        raise UnknownTarget(f"no token {token_id}; `treemail tokens list` shows them")
    info = found[0]
    if info.revoked:
        return info
    for issued_id, hashed, _ in _issued(tx, info.session.session_id):
        if issued_id == token_id and tx.count(external_token_counter(hashed)):
            tx.add(external_token_counter(hashed), -1)
    events.record(tx, info.session.session_id, events.ExternalTokenRevoked(token_id))
    return attrs.evolve(info, revoked=True)


# -- turns ---------------------------------------------------------------------------------


def _external(tx: ReadTxn, session_id: str) -> Session:
    session = need_session(tx, session_id)
    if not is_external(tx, session_id):
        raise ExternalOnly(f"session {session.reference} is hosted by the daemon, not "
                           "external", session_id=session_id)
    return session


def check_mail(tx: WriteTxn, ids: IdSource, session_id: str,
               agents: AgentCatalogue | None = None, now: float | None = None,
               ttl: int = 0) -> Request | None:
    """Open a turn that claims every deliverable message; None when there is none (the run
    in flight, if any, goes on). Refused while another request of the session is open."""
    session = _external(tx, session_id)
    current = tx.run(session.run_id) if session.run_id is not None else None
    running = current if current is not None and current.status is RunState.RUNNING else None
    if running is not None and running.open_request is not None:
        raise ExternalBusy(
            f"another connection holds the mail of {session.reference} (its check_mail "
            "claimed it and has not made its next call); it is released when that "
            "connection ends", session_id=session_id)
    expire_due(tx, session_id, now, ttl)  # the client's boundary: stale mail goes first
    admit_accepted(tx, session, running)
    if not any(m.state is not MessageState.CLAIMED for m in tx.pending(session_id)):
        return None
    if running is not None:  # ends the turn; mail it never claimed waits for the next run
        runs.end(tx, ids, session_id, running.run_id, RunTrigger.FINISH, TURN_ENDED, now=now)
    else:
        runs.reconcile(tx, ids, session_id)
    run = runs.start(tx, session_id)
    return runs.begin(tx, ids, session_id, run.run_id, agents, now)


def settle(tx: WriteTxn, session_id: str, run_id: str, request_id: str,
           committed: bool, now: float | None = None) -> bool:
    """Commit (consume) or abort (release) the request a check_mail opened. False when it is
    no longer open: recovery after a restart released it already."""
    session = need_session(tx, session_id)
    run = tx.run(run_id)
    if (session.run_id != run_id or run is None or run.status is not RunState.RUNNING
            or run.open_request != request_id):
        return False
    runs.close(tx, session_id, run_id, request_id, committed, now)
    return True


def turn_run(tx: WriteTxn, ids: IdSource, session_id: str) -> str:
    """The run a tool call of the client runs as: the turn in flight, else a new one (a
    client may send before it has read anything)."""
    session = _external(tx, session_id)
    if session.state is SessionState.RUNNING and session.run_id is not None:
        return session.run_id
    if session.state is not SessionState.QUEUED:
        number = tx.add(runs_counter(session_id), 1)
        run = Run(ids.new_id(), session_id, number)
        tx.put_run(run)
        step_session(tx, session, SessionTrigger.ENQUEUE, run, reason="turn")
    return runs.start(tx, session_id).run_id
