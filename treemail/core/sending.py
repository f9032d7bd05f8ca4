"""The ``send_message`` path: guards in contract order, then acceptance, in one transaction.

Every check reads the same write transaction that accepts the message, so a guard cannot be
overtaken between its read and the write. A refusal raises before anything is written, and
the transaction is aborted anyway, so a failed send leaves the store exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from treemail.core.addressing import resolve
from treemail.core.config import MessagingConfig
from treemail.core.delivery import accept
from treemail.core.errors import (
    ApprovalRequired,
    InvalidToolContext,
    PermissionDenied,
    SelfSend,
)
from treemail.core.guards import (
    check_body,
    check_enabled,
    check_hops,
    check_inbox,
    check_inflight,
    inbox_counter,
    pair_counter,
    parse_arguments,
)
from treemail.core.ids import MAX_REFERENCE, IdSource, storable
from treemail.core.lifecycle import RunState, SessionState
from treemail.core.permissions import Action, relationship
from treemail.core.records import (
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
from treemail.core.store import ReadTxn, WriteTxn

__all__ = ["OPERATION", "Sent", "grant_counter", "label_between", "send"]

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


def grant_counter(scope: str, subject: str, label: str) -> str:
    return f"grant/{scope}/{subject}/{OPERATION}/{label}"


def send(
    tx: WriteTxn, config: MessagingConfig, ids: IdSource, ctx: ToolContext, arguments: object,
    *, approved: bool = False,
) -> Sent:
    """The send path. ``approved`` runs a call the user approved while it waited: its run
    may have ended since (a restart interrupts every run), and it still sends once."""
    check_enabled(config)
    args = parse_arguments(arguments)
    check_body(args.body, config)
    sender, run = _tool_context(tx, ctx)
    recipient = resolve(tx, sender, args.to)
    if recipient.session_id == sender.session_id:
        raise SelfSend("you addressed your own session; message another peer of your tree")
    key = IdempotencyKey.of(ctx)
    original = tx.recall(key)
    if original is not None:
        return Sent(original, recipient.session_id, replayed=True)
    if run.status is not RunState.RUNNING and not approved:
        raise InvalidToolContext(f"run {run.run_id} is not running; only a live run can send")
    _check_permission(tx, sender, recipient, ctx)
    hop = run.base_hop + 1
    check_hops(hop, config)
    check_inbox(tx.count(inbox_counter(recipient.session_id)), config)
    check_inflight(tx.count(pair_counter(sender.session_id, recipient.session_id)), config)
    result = _accept(tx, ids, sender, recipient, args.body, args.mode, hop)
    tx.remember(key, result)
    wake = not recipient.state.has_run
    return Sent(result, recipient.session_id, replayed=False, wake=wake)


def _tool_context(tx: ReadTxn, ctx: ToolContext) -> tuple[Session, Run]:
    if not all(storable(part) for part in (ctx.session_id, ctx.run_id, ctx.tool_call_id)):
        raise InvalidToolContext(
            "a tool context's session, run and tool call ids must be printable and at most "
            f"{MAX_REFERENCE} characters; got {ctx!r}"
        )
    sender = tx.session(ctx.session_id)
    run = tx.run(ctx.run_id)
    if sender is None or run is None or run.session_id != ctx.session_id:
        raise InvalidToolContext(
            f"tool context names no run {ctx.run_id} of session {ctx.session_id}; "
            "the sender must be the executing tool call's own session and run"
        )
    return sender, run


def label_between(sender: Session, recipient: Session) -> str:
    return relationship(
        sender.session_id, sender.parent_session_id,
        recipient.session_id, recipient.parent_session_id,
    )


def _check_permission(
    tx: WriteTxn, sender: Session, recipient: Session, ctx: ToolContext
) -> None:
    label = label_between(sender, recipient)
    action = sender.agent.rules.decide(label)
    if action is Action.ALLOW:
        return
    if action is Action.DENY:
        raise PermissionDenied(
            f"permission denied: your rules do not allow send_message to a {label!r} peer",
            label=label,
        )
    once = grant_counter("once", f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}", label)
    if tx.count(once) > 0:
        tx.add(once, -tx.count(once))  # a once-grant is spent by the send it approved
        return
    for scope, subject in (("session", sender.session_id), ("tree", sender.root_session_id)):
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


def _recipient_state(recipient: Session) -> RecipientState:
    return REPORTED[recipient.state]


def _accept(
    tx: WriteTxn, ids: IdSource, sender: Session, recipient: Session, body: str, mode: Mode,
    hop: int,
) -> SendResult:
    state = _recipient_state(recipient)
    effective = mode if state is RecipientState.RUNNING else Mode.QUEUE
    message = Message(
        message_id=ids.new_id(),
        recipient=recipient.session_id,
        sender=sender.session_id,
        owner=Owner.AGENT,
        body=body,
        mode=mode,
        hop=hop,
        seq=tx.add(f"seq/{recipient.session_id}", 1),
    )
    accept(tx, message)
    return SendResult(message.message_id, effective, state)
