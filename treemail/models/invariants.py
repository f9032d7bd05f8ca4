"""The invariants the model checker asserts, each a function of a read transaction.

Ids and names mirror spec/invariants.json (``AGREE`` is engine/model agreement, which is not
in the spec: it is how the model serves as the oracle). Every check returns ``None`` or a
``Failure``: the invariant id and what went wrong, with the ids involved.

- ``agreement``: every session, run, message, pending list and approval of the engine equals
  the model's, and both will mint the same next id.
- ``limits`` (INV4, INV5, INV10, INV14) and ``mail_shape`` (INV6, INV13) recount the store.
- ``log_follows`` (INV1, INV2, INV3, INV11) reads the events one transition appended.
- ``recovered`` (INV12) right after a restart; ``settled`` (INV7, INV1) at the end of a drain.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import Any

import attrs

from treemail.core.config import MessagingConfig
from treemail.core.event_kinds import MESSAGE_PREFIX
from treemail.core.events import (
    MESSAGE_PAYLOADS,
    ProducerMessageAccepted,
    ProducerMessageConsumed,
    ProducerMessageDiscarded,
)
from treemail.core.ids import CountingIds
from treemail.core.keys import inbox_counter, pair_counter
from treemail.core.lifecycle import MessageState, MessageTrigger, RunState, SessionState
from treemail.core.records import Event, Message, Owner, Session
from treemail.core.results import CallOutcome
from treemail.core.store import ReadTxn
from treemail.models.reference import Reference
from treemail.models.world import FINAL, MESSAGE_STEPS, World

__all__ = [
    "INVARIANTS",
    "Failure",
    "Ledger",
    "agreement",
    "limits",
    "log_follows",
    "mail_shape",
    "pending_mail",
    "recovered",
    "settled",
]

INVARIANTS = {
    "AGREE": "engine_agrees_with_model",
    "INV1": "consumed_at_most_once",
    "INV2": "final_states_are_final",
    "INV3": "only_table_transitions",
    "INV4": "inbox_cap",
    "INV5": "pair_window",
    "INV6": "hop_limit",
    "INV7": "eventual_settlement",
    "INV10": "counters_match_recount",
    "INV11": "log_mirrors_state",
    "INV12": "recovery_loses_nothing",
    "INV13": "tree_scoped_mail",
    "INV14": "one_open_request",
}
Failure = tuple[str, str]  # (invariant id, what went wrong)
# The kinds of the message events, each with the lifecycle state it records entry into: any
# other event is one no check here reads. The kind and the message id are all ``log_follows``
# reads of an event, so it reads them off the stored data without decoding the payload (a
# decode was a tenth of a transition's checks; an event whose data does not decode was passed
# over then, and is checked now if it names a message).
_MAIL_STATES = {str(payload.KIND): str(payload.KIND).removeprefix(MESSAGE_PREFIX).lower()
                for payload in MESSAGE_PAYLOADS}
_ACCEPTED = str(ProducerMessageAccepted.KIND)
_SETTLING = frozenset(str(payload.KIND) for payload in (
    ProducerMessageAccepted, ProducerMessageConsumed, ProducerMessageDiscarded))


SESSION = ("session_id", "root_session_id", "parent_session_id", "agent", "handle", "ordinal",
           "state", "run_id", "live")
RUN = ("run_id", "session_id", "number", "status", "open_request")
MESSAGE = ("message_id", "recipient", "sender", "owner", "body", "mode", "hop", "seq", "state",
           "run_id", "request_id", "reason")
APPROVAL = ("approval_id", "session_id", "run_id", "tool_call_id", "tool", "label", "state",
            "scope")


def _row(record: Any, fields: tuple[str, ...], **more: Any) -> dict[str, Any] | None:
    if record is None:
        return None
    return {**{name: getattr(record, name) for name in fields}, **more}


def _diff(what: str, got: Any, want: Any) -> Failure | None:
    """Name the first row that differs, and in it only the fields that differ."""
    if got == want:
        return None
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        got, want = next((g, w) for g, w in zip(got, want, strict=True) if g != w)
    if isinstance(got, dict) and isinstance(want, dict):
        first = next(iter(want))
        keys = [first, *(k for k in want if k != first and got.get(k) != want[k])]
        got, want = ({k: row.get(k) for k in keys} for row in (got, want))
    return "AGREE", f"{what} differ\n    engine: {got!r}\n    model:  {want!r}"


def _approval(a: Any) -> dict[str, Any] | None:
    outcome = a.outcome
    if isinstance(outcome, CallOutcome):  # the model keeps only the error's code
        outcome = {k: v for k, v in outcome.as_result().items() if k != "message"}
    return _row(a, APPROVAL, arguments=dict(a.arguments), outcome=outcome)


_SESSION, _RUN, _MESSAGE = attrgetter(*SESSION), attrgetter(*RUN), attrgetter(*MESSAGE)


Pending = Mapping[str, list[Message]]  # the engine's pending mail by recipient


def pending_mail(tx: ReadTxn, sessions: Iterable[Session] | None = None) -> Pending:
    """Every session's pending mail, read once for the checks that recount it (``sessions``:
    the store's sessions, when the caller has read them already)."""
    return {s.session_id: list(tx.pending(s.session_id))
            for s in (sessions if sessions is not None else tx.sessions())}


def agreement(tx: ReadTxn, engine_ids: CountingIds, model: Reference,
              pending: Pending | None = None, sessions: list[Session] | None = None
              ) -> Failure | None:
    """Every session, run, message, pending list and approval, and the next id, alike.
    Compared as tuples of the same fields first (the checker asks after every transition,
    and nearly always the answer is yes); rows are built only to name a difference.
    ``sessions``: the store's sessions in order, when the caller has read them already."""
    sessions = sessions if sessions is not None else list(tx.sessions())
    if _alike(tx, engine_ids, model, pending if pending is not None else
              pending_mail(tx, sessions), sessions):
        return None
    return _difference(tx, engine_ids, model)


def _alike(tx: ReadTxn, engine_ids: CountingIds, model: Reference, pending: Pending,
           sessions: list[Session]) -> bool:
    world = model.world
    if engine_ids.peek() != model.ids.peek() or len(sessions) != len(world.sessions):
        return False  # the cheapest differences first: nearly every answer is yes anyway
    runs = world.runs.values()
    engine_runs = [tx.run(rid) for rid in world.runs]
    hops = _base_hops(world)
    messages = world.messages.values()
    approvals = world.approvals
    return (
        list(map(_SESSION, sessions)) == list(map(_SESSION, world.sessions.values()))
        and all(r is not None for r in engine_runs)
        and [(_RUN(r), r.base_hop) for r in engine_runs if r is not None]
        == [(_RUN(r), hops.get(r.run_id, 0)) for r in runs]
        and [m and _MESSAGE(m) for m in map(tx.message, world.messages)]
        == list(map(_MESSAGE, messages))
        and all([m.message_id for m in pending.get(sid, ())] == mids
                for sid, mids in _pending_lists(world).items())
        # Nearly always there is no approval on either side: no row is built then.
        and (sorted(map(_approval, tx.approvals()), key=repr)
             == sorted(map(_approval, approvals.values()), key=repr)
             if approvals else next(tx.approvals(), None) is None)
    )


def _base_hops(world: World) -> dict[str, int]:
    """``World.base_hop`` of every run at once, in one pass over the mail: the highest hop
    among the agent mail each run consumed (a run missing here consumed none: 0)."""
    hops: dict[str, int] = {}
    for m in world.messages.values():
        if m.state == MessageState.CONSUMED and m.owner is Owner.AGENT and m.run_id is not None:
            hops[m.run_id] = max(hops.get(m.run_id, 0), m.hop)
    return hops


def _pending_lists(world: World) -> dict[str, list[str]]:
    """Each session's pending mail ids in acceptance order, in one pass over the mail."""
    lists: dict[str, list[str]] = {sid: [] for sid in world.sessions}
    for m in world.messages.values():
        if m.pending:
            lists[m.recipient].append(m.message_id)
    return lists


def _difference(tx: ReadTxn, engine_ids: CountingIds, model: Reference) -> Failure | None:
    world = model.world
    checks: Iterable[tuple[str, Any, Any]] = (
        ("sessions", [_row(s, SESSION) for s in tx.sessions()],
         [_row(s, SESSION) for s in world.sessions.values()]),
        ("runs", [_row(r := tx.run(rid), RUN, base_hop=r and r.base_hop) for rid in world.runs],
         [_row(r, RUN, base_hop=world.base_hop(r.run_id)) for r in world.runs.values()]),
        ("messages", [_row(tx.message(mid), MESSAGE) for mid in world.messages],
         [_row(m, MESSAGE) for m in world.messages.values()]),
        ("pending lists", [[m.message_id for m in tx.pending(sid)] for sid in world.sessions],
         [[m.message_id for m in world.pending_of(sid)] for sid in world.sessions]),
        ("approvals", sorted(map(_approval, tx.approvals()), key=repr),
         sorted(map(_approval, world.approvals.values()), key=repr)),
        ("next ids", engine_ids.peek(), model.ids.peek()),
    )
    for what, got, want in checks:
        failure = _diff(what, got, want)
        if failure is not None:
            return failure
    return None


def limits(tx: ReadTxn, config: MessagingConfig, pending_by: Pending | None = None,
           listed: list[Session] | None = None) -> Failure | None:
    """INV4, INV5 and INV10 on a recount of the engine's pending mail; INV14 on its claims.
    ``listed``: the store's sessions, when the caller has read them already."""
    sessions = {s.session_id: s for s in (listed if listed is not None else tx.sessions())}
    pending_by = pending_by if pending_by is not None else pending_mail(tx)
    window, count, agent_mail = config.max_inflight_per_pair, tx.count, Owner.AGENT
    for recipient, session in sessions.items():
        pending = pending_by[recipient]
        agent = [m for m in pending if m.owner is agent_mail]
        if len(agent) > config.max_pending_per_session:
            return "INV4", f"{recipient} holds {len(agent)} pending agent messages"
        if count(_inbox_counter(recipient)) != len(agent):
            return "INV10", f"inbox counter of {recipient} is not {len(agent)}"
        pairs: dict[str | None, int] = {}  # a plain dict: a Counter's constructor is Python
        for m in agent:
            pairs[m.sender] = pairs.get(m.sender, 0) + 1
        for sender in sessions:
            pair = pairs.get(sender, 0)
            if window > 0 and pair > window:
                return "INV5", f"pair {sender} -> {recipient} holds {pair} pending messages"
            if count(_pair_counter(sender, recipient)) != pair:
                return "INV10", f"pair counter {sender} -> {recipient} is not {pair}"
        failure = _claims(tx, session, pending)
        if failure is not None:
            return failure
    return None


def _claims(tx: ReadTxn, session: Session, pending: list[Message]) -> Failure | None:
    """INV14 for one recipient: its claimed mail is its run's open request's."""
    claimed = [m for m in pending if m.state == MessageState.CLAIMED]
    if not claimed:
        return None  # the run is read only when there is a claim to hold it to
    run = tx.run(session.run_id) if session.run_id is not None else None
    for m in claimed:
        if (run is None or run.status != RunState.RUNNING or m.run_id != run.run_id
                or m.request_id != run.open_request):
            return "INV14", f"{m.message_id} is claimed outside its run's open request"
    return None


# The counters' names, built once for each recipient and pair: the same few ids recur in
# every state.
_inbox_counter = functools.lru_cache(maxsize=4096)(inbox_counter)
_pair_counter = functools.lru_cache(maxsize=4096)(pair_counter)


def mail_shape(tx: ReadTxn, world: World, config: MessagingConfig) -> Failure | None:
    """INV6 (hops within the limit) and INV13 (agent mail links two sessions of one tree)."""
    for message_id in world.messages:
        m = tx.message(message_id)
        if m is None or m.owner is not Owner.AGENT:
            continue
        if config.max_hops > 0 and m.hop > config.max_hops:
            return "INV6", f"{m.message_id} carries hop {m.hop} > max_hops {config.max_hops}"
        sender, recipient = tx.session(m.sender or ""), tx.session(m.recipient)
        if sender is None or recipient is None or m.sender == m.recipient or (
                sender.root_session_id != recipient.root_session_id):
            return "INV13", f"{m.message_id} does not link two peers of one tree"
    return None


def _illegal(message_id: str, before: str | None, after: str) -> Failure | None:
    """Whether the log's step ``before`` -> ``after`` is one of the lifecycle table."""
    if before is None:
        ok = after == MessageState.ACCEPTED
    else:
        ok = any(MESSAGE_STEPS.get((before, t)) == after for t in MessageTrigger)
    if ok:
        return None
    what = f"{message_id} logged {before} -> {after}"
    if before in FINAL:
        code = "INV1" if after == MessageState.CONSUMED else "INV2"
        return code, f"final message changed: {what}"
    return ("INV1" if after == MessageState.CONSUMED else "INV3"), f"not a lifecycle step: {what}"


def log_follows(tx: ReadTxn, parent: World, child: World, events: list[Event]) -> Failure | None:
    """INV1, INV2, INV3 and INV11 from the events one transition appended."""
    last = {mid: m.state for mid, m in parent.messages.items()}
    for event in events:
        state = _MAIL_STATES.get(event.kind)
        message_id = event.data.get("message_id") if state is not None else None
        if state is None or not isinstance(message_id, str):
            continue
        failure = _illegal(message_id, last.get(message_id), state)
        if failure is not None:
            return failure
        last[message_id] = state
    for message_id in child.messages:
        stored: Message | None = tx.message(message_id)
        if stored is None or stored.state != last.get(message_id):
            return "INV11", (f"{message_id} is {stored and stored.state} but its log says "
                             f"{last.get(message_id)}")
    return None


def recovered(tx: ReadTxn) -> Failure | None:
    """INV12, right after a restart: nothing runs, nothing is claimed, all mail deliverable."""
    for session in tx.sessions():
        if session.state == SessionState.RUNNING:
            return "INV12", f"{session.session_id} still running after recovery"
        for m in tx.pending(session.session_id):
            if m.state == MessageState.CLAIMED or session.state != SessionState.QUEUED:
                return "INV12", f"{m.message_id} ({m.state}) is not deliverable after recovery"
    return None


def _final(tx: ReadTxn, message_id: str) -> Failure | None:
    message = tx.message(message_id)
    if message is None or message.state not in FINAL:
        state = message.state if message is not None else "lost"
        return "INV7", f"quiet, yet {message_id} is {state}"
    if message.state == MessageState.DISCARDED and not (message.reason or "").strip():
        return "INV7", f"{message.message_id} was discarded without a reason"
    return None


@attrs.frozen
class Ledger:
    """What ``settled`` reads off the feed up to event ``upto``: the messages accepted, in
    order, and how many times each was consumed or discarded. A state's ledger is its
    parent's plus the events its transition appended, so no drain reads the whole feed."""

    upto: int = 0
    accepted: tuple[str, ...] = ()
    ends: Mapping[str, int] = attrs.field(factory=dict)

    def then(self, events: Iterable[tuple[int, Event]]) -> Ledger:
        # The parent's tuple and dict are shared until an event adds to them: most steps
        # append no settling event, and nothing mutates a ledger's ``ends`` once it is built.
        accepted: list[str] | None = None
        ends: dict[str, int] | None = None
        upto = self.upto
        for number, event in events:
            upto = number
            kind = event.kind
            if kind not in _SETTLING:
                continue
            # The kind and the message id are all this reads: no payload is decoded.
            message_id = event.data.get("message_id")
            if not isinstance(message_id, str):
                continue
            if kind == _ACCEPTED:
                if accepted is None:
                    accepted = list(self.accepted)
                accepted.append(message_id)
            else:
                if ends is None:
                    ends = dict(self.ends)
                ends[message_id] = ends.get(message_id, 0) + 1
        if upto == self.upto and accepted is None and ends is None:
            return self
        return Ledger(upto, self.accepted if accepted is None else tuple(accepted),
                      self.ends if ends is None else ends)


def settled(tx: ReadTxn, ledger: Ledger = Ledger()) -> Failure | None:
    """At a quiet state: every message ever accepted (per the feed) is consumed or discarded
    with a reason, and its log holds exactly one consume or discard (INV7, INV1). ``ledger``:
    the feed read so far (by the state the drain began at); the rest is read here."""
    ledger = ledger.then(tx.feed(ledger.upto))
    for message_id in ledger.accepted:
        failure = _final(tx, message_id)
        if failure is not None:
            return failure
    twice = [mid for mid, n in ledger.ends.items() if n != 1]
    return ("INV1", f"consumed or discarded more than once: {twice}") if twice else None
