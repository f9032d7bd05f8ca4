"""The reference model's held calls: a call an ask rule stopped waits for the user's answer,
and an approval grants a scope and runs the call at once.

Functions of the ``Reference`` they act on, as ``external`` and ``receipts`` are: each is one
operation of the model, all or nothing, built from the model's own steps.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from treemail.core import errors
from treemail.core.approvals import SCOPES
from treemail.core.lifecycle import ApprovalState, SessionState
from treemail.core.records import GrantScope, ToolContext
from treemail.models.world import ApprovalRecord

# The reference model these read and step (``Reference``; not imported: it imports this).
Reference = Any

__all__ = ["answer", "grant", "hold"]

_NO_RUN = (SessionState.IDLE, SessionState.FINISHED)


def grant(model: Reference, scope: str, subject: str, label: str) -> None:
    """A grant of ``scope`` over ``subject`` for calls labelled ``label``, given directly."""
    if scope not in SCOPES:
        raise errors.InvalidRequest("bad scope")
    model.world.grants.add((GrantScope(scope), subject, label))


def hold(model: Reference, ctx: ToolContext, tool: str, arguments: Mapping[str, object],
         label: str) -> ApprovalRecord:
    """Hold a call an ask rule stopped; holding the same call again finds the same one."""
    approval_id = f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}"
    if approval_id in model.world.approvals:
        held: ApprovalRecord = model.world.approvals[approval_id]
        return held
    if ctx.session_id not in model.world.sessions or ctx.run_id not in model.world.runs:
        raise errors.InvalidRequest("no such session or run")
    held = ApprovalRecord(approval_id, ctx.session_id, ctx.run_id, ctx.tool_call_id, tool,
                          dict(arguments), label)
    model.world.approvals[approval_id] = held
    return held


def answer(model: Reference, approval_id: str, approve: bool, scope: str) -> ApprovalRecord:
    """Approving grants ``scope`` and runs the held call at once (even if its run has
    ended); a refusal by a later guard becomes the call's outcome. Denying answers the
    call with permission denied."""
    answered, wake = model._atomic(lambda: _answer(model, approval_id, approve, scope))
    if wake is not None:
        model._wake(wake)
    held: ApprovalRecord = answered
    return held


def _answer(model: Reference, approval_id: str, approve: bool, scope: str
            ) -> tuple[ApprovalRecord, str | None]:
    held = model.world.approvals.get(approval_id)
    if held is None or held.state is not ApprovalState.PENDING:
        raise errors.UnknownApproval("no pending approval")
    if scope not in SCOPES:
        raise errors.InvalidRequest("bad scope")
    if not approve:
        denied = errors.PermissionDenied.code
        return _settle(held, ApprovalState.DENIED, None, denied), None
    sender = model.world.sessions[held.session_id]
    granted = GrantScope(scope)
    subject = {GrantScope.ONCE: approval_id, GrantScope.SESSION: sender.session_id,
               GrantScope.TREE: sender.root_session_id}[granted]
    model.world.grants.add((granted, subject, held.label))
    ctx = ToolContext(held.session_id, held.run_id, held.tool_call_id)
    before = copy.deepcopy(model.world)
    try:
        result, recipient, replayed = model._send(ctx, held.arguments, approved=True)
    except errors.Refusal as refused:
        model.world = before  # the refused call changed nothing but the grant
        held = model.world.approvals[approval_id]
        return _settle(held, ApprovalState.APPROVED, scope, refused.code), None
    outcome = {"message_id": result.message_id, "mode": result.mode.value,
               "recipient_state": result.recipient_state.value}
    answered = _settle(held, ApprovalState.APPROVED, scope, outcome)
    idle = model.world.sessions[recipient].state in _NO_RUN
    return answered, recipient if idle and not replayed else None


def _settle(held: ApprovalRecord, state: ApprovalState, scope: str | None,
            outcome: str | dict[str, str]) -> ApprovalRecord:
    held.state, held.scope = state, scope
    held.outcome = {"error": outcome} if isinstance(outcome, str) else outcome  # str: a code
    return held
