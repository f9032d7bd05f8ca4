"""The ``send_message`` path: the guards of ``GUARDS`` in order, then acceptance, in one
transaction.

``GUARDS`` is the contract's guard order as data: each entry names the guard, the errors it
raises, what it checks, and the check itself. ``send`` runs them in order and the first
failure is the answer; ``GUARD_ORDER`` and spec/guards.json are derived from the tuple, so the
order the code runs is the order the spec states. Adding a guard is adding one entry (see
CONTRIBUTING.md).

Every check reads the same write transaction that accepts the message, so a guard cannot be
overtaken between its read and the write. A refusal raises before anything is written (a
spent once-grant is undone with the aborted transaction), so a failed send leaves the store
exactly as it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii

import attrs

from treemail.core import events, keys
from treemail.core.addressing import resolve
from treemail.core.config import MessagingConfig
from treemail.core.errors import (
    ApprovalRequired,
    IdempotencyConflict,
    InboxFull,
    InflightFull,
    InvalidArguments,
    InvalidBody,
    InvalidToolContext,
    MaxHopsExceeded,
    MessagingDisabled,
    NotTreePeer,
    PermissionDenied,
    SelfSend,
    TreemailError,
    UnknownSession,
    UnknownSubagentReference,
)
from treemail.core.guards import (
    SendArguments,
    check_body,
    check_enabled,
    check_hops,
    check_inbox,
    check_inflight,
    parse_arguments,
)
from treemail.core.ids import MAX_REFERENCE, IdSource, storable
from treemail.core.keys import CounterName
from treemail.core.lifecycle import RunState, SessionState
from treemail.core.permissions import Action, Rules, relationship
from treemail.core.records import (
    AgentSpec,
    Approval,
    GrantScope,
    IdempotencyKey,
    Message,
    Mode,
    Owner,
    RecipientState,
    Run,
    SendResult,
    Session,
    ToolContext,
)
from treemail.core.store import MailCounts, ReadTxn, WriteTxn

__all__ = [
    "GUARDS",
    "GUARD_ORDER",
    "OPERATION",
    "REPORTED",
    "AgentCatalogue",
    "Attempt",
    "Guard",
    "Sent",
    "arguments_digest",
    "current_rules",
    "grant_counter",
    "label_between",
    "send",
    "text_digest",
]

# The agent catalogue a core receives: an agent's current spec by name, or None if no doc
# defines that name any more. Rules are read through it at each visibility check and send.
AgentCatalogue = Callable[[str], AgentSpec | None]


def current_rules(agents: AgentCatalogue | None, session: Session) -> Rules:
    """The message rules that govern ``session`` now: its agent's current doc, by name; no
    such agent any more means no rules (deny). Without a catalogue (an embedding that has
    none), the rules stored with the session at creation."""
    if agents is None:
        return session.agent.rules
    spec = agents(session.agent.name)
    return spec.rules if spec is not None else Rules()


# Grants are keyed by the operation's identity; the argument schema is part of it, so grants
# made for an older argument shape (recipient_session_id) do not carry over.
OPERATION = "send_message(to,body,mode)"


@attrs.frozen
class Sent:
    result: SendResult
    recipient: str
    replayed: bool
    # The recipient had no run (idle or finished): only then must a reconcile wake it.
    wake: bool = False


@attrs.define
class Attempt:
    """One send_message call on its way through the guards; each guard fills in what it
    established (the parsed arguments, the sender and its run, the recipient)."""

    tx: WriteTxn
    config: MessagingConfig
    ctx: ToolContext
    arguments: object
    approved: bool
    agents: AgentCatalogue | None = None
    args: SendArguments | None = None
    sender: Session | None = None
    run: Run | None = None
    recipient: Session | None = None
    replay: SendResult | None = None
    key: IdempotencyKey | None = None  # the call's replay key, made once for recall and remember
    digest: str = ""
    # The recipient's tally as the inbox guard read it (every config runs that guard): the
    # pair guard and the acceptance read it there, not from the store again.
    counts: MailCounts = (0, 0, 0)

    # The guards run in order, so a field is set before any later guard reads it; each
    # reader asserts it is, where it reads it (an assert costs no call on the send path).


def _always(config: MessagingConfig) -> bool:
    return True


@attrs.frozen
class Guard:
    """One check of send_message: its name in the contract, the errors it raises, one line
    saying what it checks, and the check. A check raises its refusal or returns.

    ``applies`` says whether the check can refuse anything under a config: where it cannot
    (messaging enabled, no hop limit, no pair window) and it establishes nothing a later
    guard reads, the send leaves it out of its loop (``_checks``)."""

    name: str
    errors: tuple[type[TreemailError], ...]
    doc: str
    check: Callable[[Attempt], None]
    applies: Callable[[MessagingConfig], bool] = _always


def grant_counter(scope: GrantScope, subject: str, label: str) -> CounterName:
    """The grant of send_message, the one operation grants cover today."""
    return keys.grant_counter(scope, subject, OPERATION, label)


def arguments_digest(args: SendArguments) -> str:
    """What identifies a call's arguments for replay: the parsed ``to``, ``body`` and mode
    (an omitted mode is the default steer, so it is the same call)."""
    return text_digest(args.to, args.body, _MODE_VALUES[args.mode])


# A mode's value through a table: ``mode.value`` is two calls (a descriptor), on every send.
_MODE_VALUES: Mapping[Mode, str] = {mode: mode.value for mode in Mode}


def text_digest(*parts: str) -> str:
    """The SHA-256 of ``json.dumps(list(parts))``, byte for byte (ASCII escapes, lone
    surrogates too, ", " between), built from its string encoder: digests stored by earlier
    versions still match. What a replay key stores to tell a retry from other arguments."""
    canonical = "[" + ", ".join(map(encode_basestring_ascii, parts)) + "]"
    return hashlib.sha256(canonical.encode()).hexdigest()


def _disabled(a: Attempt) -> None:
    check_enabled(a.config)


def _invalid_arguments(a: Attempt) -> None:
    a.args = parse_arguments(a.arguments)


def _idempotent_replay(a: Attempt) -> None:
    """Before any guard that reads the config or the tree: a true retry gets its original
    result whatever changed since; the same key with other arguments is refused."""
    a.key = IdempotencyKey.of(a.ctx)
    a.sender, a.run, original = _tool_context(a.tx, a.ctx, a.key)
    assert a.args is not None
    a.digest = arguments_digest(a.args)
    if original is None:
        return
    # A result stored before digests were kept (None) can only be replayed.
    if original.digest not in (None, a.digest):
        raise IdempotencyConflict(
            f"tool call {a.ctx.tool_call_id} already sent a message with other arguments; "
            "a retry must repeat the call exactly; a new message needs a new tool call id",
            tool_call_id=a.ctx.tool_call_id,
            message_id=original.message_id,
        )
    a.replay = original


def _invalid_body(a: Attempt) -> None:
    assert a.args is not None
    check_body(a.args.body, a.config)


def _recipient_resolution(a: Attempt) -> None:
    assert a.sender is not None and a.args is not None
    a.recipient = resolve(a.tx, a.sender, a.args.to)


def _self_send(a: Attempt) -> None:
    assert a.recipient is not None
    if a.recipient.session_id == a.ctx.session_id:
        raise SelfSend("you addressed your own session; message another peer of your tree")


def _permission(a: Attempt) -> None:
    sender, run, recipient = a.sender, a.run, a.recipient
    assert sender is not None and run is not None and recipient is not None
    if run.status is not RunState.RUNNING and not a.approved:
        raise InvalidToolContext(f"run {run.run_id} is not running; only a live run can send")
    # ``current_rules``, its case without a catalogue written out: an embedding's every send.
    rules = sender.agent.rules if a.agents is None else current_rules(a.agents, sender)
    _check_permission(a.tx, rules, sender, recipient, a.ctx)


def _max_hops(a: Attempt) -> None:
    assert a.run is not None
    # The hop the message would carry; the acceptance gives it that hop, whether or not a
    # hop limit ran this guard.
    check_hops(a.run.base_hop + 1, a.config)


def _inbox_full(a: Attempt) -> None:
    assert a.recipient is not None
    a.counts = a.tx.mail_counts(a.recipient.session_id, a.ctx.session_id)
    check_inbox(a.counts[1], a.config)


def _inflight_full(a: Attempt) -> None:
    check_inflight(a.counts[2], a.config)


# The contract's order (design.md, "Guards and their order"); the first failure is the answer.
GUARDS: tuple[Guard, ...] = (
    Guard("disabled", (MessagingDisabled,), "[messaging] enabled is false", _disabled,
          lambda config: not config.enabled),
    Guard("invalid_arguments", (InvalidArguments,),
          "the arguments are not exactly to, body and an optional mode", _invalid_arguments),
    Guard("idempotent_replay", (InvalidToolContext, IdempotencyConflict),
          "the tool context names a run of the sender; a retried tool call with the same "
          "arguments returns its original result, whatever changed since; the same call id "
          "with other arguments is refused", _idempotent_replay),
    Guard("invalid_body", (InvalidBody,),
          "the body is empty, whitespace only, not encodable, or too large", _invalid_body),
    Guard("recipient_resolution", (UnknownSession, NotTreePeer, UnknownSubagentReference),
          "a UUID must name a session of the sender's tree, else a handle must name a live "
          "peer of that tree", _recipient_resolution),
    Guard("self_send", (SelfSend,), "the recipient is the sender's own session", _self_send),
    Guard("permission", (InvalidToolContext, PermissionDenied, ApprovalRequired),
          "the sending run is live (or the call was approved), and the sender's rule for the "
          "recipient's label is allow, ask with a grant, or deny", _permission),
    Guard("max_hops_exceeded", (MaxHopsExceeded,),
          "the new message's hop would exceed max_hops > 0", _max_hops,
          lambda config: config.max_hops > 0),
    Guard("inbox_full", (InboxFull,),
          "the recipient holds max_pending_per_session pending agent messages", _inbox_full),
    Guard("inflight_full", (InflightFull,),
          "the pair has max_inflight_per_pair > 0 pending messages", _inflight_full,
          lambda config: config.max_inflight_per_pair > 0),
)
GUARD_ORDER = tuple(guard.name for guard in GUARDS)
_CONTRACT = GUARDS  # the tuple ``_contract_checks`` writes out


def _contract_checks(a: Attempt) -> None:
    """``GUARDS`` as one function: the contract's checks in its order, each left out where
    its ``applies`` says it cannot refuse, without a call per guard to reach it. The seams a
    bug can be planted in (``resolve``, ``arguments_digest``, ``check_hops``, ...) are read by
    name at each call, as the guards read them; a refusal is raised by the guard's own
    function. ``send`` runs the tuple's checks one by one when ``GUARDS`` is another tuple."""
    config, ctx = a.config, a.ctx
    if not config.enabled:
        _disabled(a)
    a.args = args = parse_arguments(a.arguments)
    _idempotent_replay(a)
    if a.replay is not None:
        return
    check_body(args.body, config)
    assert a.sender is not None
    a.recipient = recipient = resolve(a.tx, a.sender, args.to)
    if recipient.session_id == ctx.session_id:
        _self_send(a)
    _permission(a)
    if config.max_hops > 0:
        _max_hops(a)
    a.counts = a.tx.mail_counts(recipient.session_id, ctx.session_id)
    check_inbox(a.counts[1], config)
    if config.max_inflight_per_pair > 0:
        _inflight_full(a)


# The checks a config runs, in contract order, made once per config (and per GUARDS: a
# planted-bug probe swaps the tuple). Keyed by the config's identity, which the entry keeps
# alive, so hashing the config costs no call per send; a few configs live at once.
_Checks = tuple[Callable[[Attempt], None], ...]
_CHECKS: dict[int, tuple[MessagingConfig, tuple[Guard, ...], _Checks]] = {}


def _checks(config: MessagingConfig) -> _Checks:
    found = _CHECKS.get(id(config))
    if found is None or found[0] is not config or found[1] is not GUARDS:
        if len(_CHECKS) > 64:
            _CHECKS.clear()
        checks = tuple(guard.check for guard in GUARDS if guard.applies(config))
        found = _CHECKS[id(config)] = (config, GUARDS, checks)
    return found[2]


def send(
    tx: WriteTxn, config: MessagingConfig, ids: IdSource, ctx: ToolContext, arguments: object,
    *, approved: bool = False, agents: AgentCatalogue | None = None, now: float | None = None,
) -> Sent:
    """The send path. ``approved`` runs a call the user approved while it waited: its run
    may have ended since (a restart interrupts every run), and it still sends once."""
    attempt = Attempt(tx, config, ctx, arguments, approved, agents)
    if GUARDS is _CONTRACT:
        _contract_checks(attempt)
    else:
        for check in _checks(config):
            check(attempt)
            if attempt.replay is not None:
                break
    if attempt.replay is not None:
        return Sent(attempt.replay, _replayed_recipient(tx, attempt.replay), replayed=True)
    sender, recipient, args = attempt.sender, attempt.recipient, attempt.args
    assert sender is not None and recipient is not None and args is not None
    assert attempt.key is not None
    result = _accept(tx, ids, attempt, sender.session_id, recipient, args, now)
    return Sent(result, recipient.session_id, replayed=False, wake=_WAKES[recipient.state])


def _replayed_recipient(tx: ReadTxn, original: SendResult) -> str:
    """Whom the original call reached: read from its message, not from today's tree."""
    message = tx.message(original.message_id)
    return message.recipient if message is not None else ""


def _tool_context(
    tx: ReadTxn, ctx: ToolContext, key: IdempotencyKey
) -> tuple[Session, Run, SendResult | None]:
    """The sender and its run, and the result stored under the call's replay ``key``: one
    read of the store (``tool_call``)."""
    # The session and run ids are checked only when they name nothing: a stored session and
    # run have minted, storable ids, and a lookup of an id no store could key finds nothing.
    # The answer is the same as checking all three first, for two checks fewer per send.
    if not storable(ctx.tool_call_id):
        raise _unstorable(ctx)
    sender, run, original = tx.tool_call(ctx.session_id, ctx.run_id, key)
    if sender is None or run is None or run.session_id != ctx.session_id:
        if not (storable(ctx.session_id) and storable(ctx.run_id)):
            raise _unstorable(ctx)
        raise InvalidToolContext(
            f"tool context names no run {ctx.run_id} of session {ctx.session_id}; "
            "the sender must be the executing tool call's own session and run"
        )
    return sender, run, original


def _unstorable(ctx: ToolContext) -> InvalidToolContext:
    return InvalidToolContext(
        "a tool context's session, run and tool call ids must be printable and at most "
        f"{MAX_REFERENCE} bytes of UTF-8; got {ctx!r}"
    )


def label_between(sender: Session, recipient: Session) -> str:
    return relationship(
        sender.session_id, sender.parent_session_id,
        recipient.session_id, recipient.parent_session_id,
    )


def _check_permission(
    tx: WriteTxn, rules: Rules, sender: Session, recipient: Session, ctx: ToolContext
) -> None:
    """The live rule decides first: a grant given under ``ask`` no longer applies once the
    rule is ``deny``, and is not needed once it is ``allow``."""
    label = relationship(  # ``label_between``, written out: every send asks it
        sender.session_id, sender.parent_session_id,
        recipient.session_id, recipient.parent_session_id,
    )
    action = rules.decide(label)
    if action is Action.ALLOW:
        return
    if action is Action.DENY:
        raise PermissionDenied(
            f"permission denied: your rules do not allow send_message to a {label!r} peer",
            label=label,
        )
    once = grant_counter(GrantScope.ONCE, Approval.id_for(ctx), label)
    if tx.count(once) > 0:
        tx.add(once, -tx.count(once))  # a once-grant is spent by the send it approved
        return
    for scope, subject in ((GrantScope.SESSION, sender.session_id),
                           (GrantScope.TREE, sender.root_session_id)):
        if tx.count(grant_counter(scope, subject, label)) > 0:
            return
    raise ApprovalRequired(
        f"send_message to a {label!r} peer needs the user's approval; it waits for an answer",
        label=label,
        operation=OPERATION,
    )


# What a send reports as recipient_state for a recipient in each session state.
REPORTED: Mapping[SessionState, RecipientState] = {
    SessionState.IDLE: RecipientState.QUEUED,
    SessionState.QUEUED: RecipientState.QUEUED,
    SessionState.RUNNING: RecipientState.RUNNING,
    SessionState.FINISHED: RecipientState.WAKING_FINISHED,
}


# Whether a send must wake its recipient: it has no run (``has_run``, a property, costs a
# call on every send).
_WAKES: Mapping[SessionState, bool] = {state: not state.has_run for state in SessionState}


def _recipient_state(recipient: Session) -> RecipientState:
    return REPORTED[recipient.state]


def _accept(
    tx: WriteTxn, ids: IdSource, attempt: Attempt, sender: str, recipient: Session,
    args: SendArguments, now: float | None,
) -> SendResult:
    """What ``transitions.accept`` does for agent mail (its text check is the body guard's),
    in the store's one send-specific write, with the seq the inbox guard read."""
    state = REPORTED[recipient.state]
    effective = args.mode if state is RecipientState.RUNNING else Mode.QUEUE
    assert attempt.run is not None
    message = Message(ids.new_id(), recipient.session_id, sender, Owner.AGENT, args.body,
                      args.mode, attempt.run.base_hop + 1, attempt.counts[0] + 1, aged=now)
    result = SendResult(message.message_id, effective, state, attempt.digest)
    assert attempt.key is not None
    tx.accept_mail(message, events.ACCEPTED, events.accepted_data(message), attempt.key, result,
                   attempt.counts)
    return result
