"""Approvals: a tool call held by an ``ask`` rule, durably, until the user answers.

An approval steps through ``APPROVAL`` (``ApprovalLifecycle``): pending until the user
approves or denies it. The held call keeps its tool context. Approving it records a grant for
the chosen ``GrantScope`` (``once`` for this call, ``session`` for the sender, ``tree`` for
its whole tree) keyed by the operation's identity, then runs the call in the same
transaction; a later retry of the same tool call finds the result in the idempotency index.
Denying it answers the call with the generic permission-denied error. Pending approvals live
in the store, so they survive a restart; a call approved after its run has died still sends
exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from treemail.core import events
from treemail.core.config import MessagingConfig
from treemail.core.errors import InvalidRequest, PermissionDenied, Refusal, UnknownApproval
from treemail.core.ids import IdSource
from treemail.core.lifecycle import APPROVAL, ApprovalState, ApprovalTrigger
from treemail.core.records import Approval, GrantScope, ToolContext
from treemail.core.results import CallOutcome
from treemail.core.sending import AgentCatalogue, grant_counter, send
from treemail.core.store import WriteTxn

__all__ = ["REASON_LIMIT", "SCOPES", "answer", "hold", "scope_named"]

# Plain text, as the wire, the CLI and the stored record spell them.
SCOPES: tuple[str, ...] = tuple(scope.value for scope in GrantScope)
# A deny's reason is a sentence for the agent, kept in the approval and its event: bounded
# like any text a user puts into the store.
REASON_LIMIT = 2000


def scope_named(scope: str, what: str) -> GrantScope:
    """The grant scope ``scope`` names; ``what`` (grant, approval) says whose it is."""
    if scope not in SCOPES:
        listed = ", ".join(SCOPES[:-1]) + " or " + SCOPES[-1]
        raise InvalidRequest(f"{what} scope must be {listed}, not {scope!r}")
    return GrantScope(scope)


def hold(
    tx: WriteTxn, ctx: ToolContext, tool: str, arguments: Mapping[str, object], label: str
) -> Approval:
    """Record the call as waiting; asking again for the same call returns the same approval."""
    approval_id = Approval.id_for(ctx)
    existing = tx.approval(approval_id)
    if existing is not None:
        return existing
    if tx.session(ctx.session_id) is None or tx.run(ctx.run_id) is None:
        raise InvalidRequest(f"no run {ctx.run_id} of session {ctx.session_id} to hold")
    approval = Approval(approval_id, ctx.session_id, ctx.run_id, ctx.tool_call_id, tool,
                        dict(arguments), label)
    tx.put_approval(approval)
    events.record(tx, ctx.session_id, events.ApprovalRequested(
        approval_id, tool, label, ctx.tool_call_id, ctx.run_id))
    return approval


def answer(
    tx: WriteTxn, config: MessagingConfig, ids: IdSource, approval_id: str, approve: bool,
    scope: str, agents: AgentCatalogue | None = None, reason: str | None = None,
    now: float | None = None,
) -> tuple[Approval, str | None]:
    """Answer a held call. Returns the answered approval and, if the call sent mail to a
    session without a run, that session (the caller wakes it). A deny's ``reason`` is part
    of the error the agent reads. ``now`` stamps the mail an approved send accepts, as any
    send's (None while expiry is off): its age starts when it is accepted, not later."""
    approval = tx.approval(approval_id)
    if approval is None or approval.state is not ApprovalState.PENDING:
        raise UnknownApproval(f"no pending approval {approval_id}; list pending approvals first")
    granted = scope_named(scope, "approval")
    if reason is not None and approve:
        raise InvalidRequest("a reason goes with a deny; approve without one")
    if reason is not None and len(reason) > REASON_LIMIT:
        raise InvalidRequest(f"a deny's reason is at most {REASON_LIMIT} characters, not "
                             f"{len(reason)}; say it shorter")
    trigger = ApprovalTrigger.APPROVE if approve else ApprovalTrigger.DENY
    state = APPROVAL.step(f"approval {approval_id}", approval.state, trigger)
    wake: str | None = None
    if approve:
        _grant(tx, approval, granted)
        outcome, wake = _run(tx, config, ids, approval, agents, now)
    else:
        why = f"; the user said: {reason}" if reason else ""
        denied = PermissionDenied(f"permission denied: the user did not approve this call{why}")
        outcome = _error(denied)
    answered = attrs.evolve(approval, state=state, scope=granted.value if approve else None,
                            outcome=outcome)
    tx.put_approval(answered)
    events.record(tx, approval.session_id, events.ApprovalAnswered(
        approval_id, state, answered.scope, outcome))
    return answered, wake


def _grant(tx: WriteTxn, approval: Approval, scope: GrantScope) -> None:
    sender = tx.session(approval.session_id)
    assert sender is not None  # held approvals name stored sessions
    subject = {
        GrantScope.ONCE: approval.approval_id,
        GrantScope.SESSION: sender.session_id,
        GrantScope.TREE: sender.root_session_id,
    }[scope]
    name = grant_counter(scope, subject, approval.label)
    if not tx.count(name):
        tx.add(name, 1)


def _run(
    tx: WriteTxn, config: MessagingConfig, ids: IdSource, approval: Approval,
    agents: AgentCatalogue | None, now: float | None,
) -> tuple[CallOutcome, str | None]:
    """Run the approved call; a refusal by a later guard is its outcome, not a failure."""
    try:
        with tx.savepoint() as inner:
            sent = send(inner, config, ids, approval.context, approval.arguments, approved=True,
                        agents=agents, now=now)
    except Refusal as refused:
        return _error(refused), None
    return CallOutcome.ok(sent.result.as_tool_result()), sent.recipient if sent.wake else None


def _error(error: Refusal) -> CallOutcome:
    return CallOutcome.failed(error)
