"""The event log's kinds, declared once: every kind of entry a session's log holds is an
``EventKind``, stored by its name. No other module spells a kind
(``tests/unit/test_event_kinds.py`` checks the AST); ``treemail.core.events`` re-exports it.
"""

from __future__ import annotations

import enum

__all__ = ["MESSAGE_PREFIX", "EventKind", "message_kind"]


class EventKind(enum.StrEnum):
    """The kinds of entry a session's event log holds, by their stored name."""

    SESSION_CREATED = "SessionCreated"
    SESSION_REVERTED = "SessionReverted"
    SESSION_FORKED = "SessionForked"
    RUN_QUEUED = "RunQueued"
    RUN_STARTED = "RunStarted"
    RUN_FINISHED = "RunFinished"
    RUN_INTERRUPTED = "RunInterrupted"
    REQUEST_BEGUN = "RequestBegun"
    REQUEST_COMMITTED = "RequestCommitted"
    REQUEST_ABORTED = "RequestAborted"
    MODEL_OUTPUT = "ModelOutput"
    TOOL_RESULTS = "ToolResults"
    DELEGATION_COMPLETED = "DelegationCompleted"
    APPROVAL_REQUESTED = "ApprovalRequested"
    APPROVAL_ANSWERED = "ApprovalAnswered"
    PRODUCER_MESSAGE_ACCEPTED = "ProducerMessageAccepted"
    PRODUCER_MESSAGE_ADMITTED = "ProducerMessageAdmitted"
    PRODUCER_MESSAGE_CLAIMED = "ProducerMessageClaimed"
    PRODUCER_MESSAGE_RELEASED = "ProducerMessageReleased"
    PRODUCER_MESSAGE_CONSUMED = "ProducerMessageConsumed"
    PRODUCER_MESSAGE_DISCARDED = "ProducerMessageDiscarded"
    EXTERNAL_TOKEN_ISSUED = "ExternalTokenIssued"
    EXTERNAL_TOKEN_REVOKED = "ExternalTokenRevoked"


# Message kinds are named after the lifecycle state they record entry into.
MESSAGE_PREFIX = "ProducerMessage"
# By state, looked up on every message step instead of spelling the kind's name each time.
_MESSAGE_KINDS = {kind.value.removeprefix(MESSAGE_PREFIX).lower(): kind
                  for kind in EventKind if kind.value.startswith(MESSAGE_PREFIX)}


def message_kind(state: str) -> EventKind:
    """The kind recording a message's entry into lifecycle state ``state``."""
    return _MESSAGE_KINDS.get(state) or EventKind(MESSAGE_PREFIX + state.capitalize())
