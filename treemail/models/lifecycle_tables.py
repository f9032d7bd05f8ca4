"""The reference model's lifecycles: the four state machines written out by hand as literal
tables, and ``step``, which walks them. Re-stated on purpose instead of importing the core's
(see ``treemail.models.world``, which re-exports them).
"""

from __future__ import annotations

from treemail.core import errors
from treemail.core.lifecycle import (
    MessageState,
    MessageTrigger,
    RequestState,
    RequestTrigger,
    RunState,
    RunTrigger,
    SessionState,
    SessionTrigger,
)

__all__ = [
    "FINAL",
    "MESSAGE_STEPS",
    "MESSAGE_TRIGGERS",
    "REQUEST_STEPS",
    "REQUEST_TRIGGERS",
    "RUN_STEPS",
    "RUN_TRIGGERS",
    "SESSION_STEPS",
    "SESSION_TRIGGERS",
    "step",
]


# -- the lifecycles, written out by hand from design.md's table --------------------------------

# (state, trigger) -> next state. A pair that is not listed is an illegal step.
MESSAGE_STEPS: dict[tuple[str, str], str] = {
    (MessageState.ACCEPTED, MessageTrigger.ADMIT): MessageState.ADMITTED,
    (MessageState.ADMITTED, MessageTrigger.CLAIM): MessageState.CLAIMED,
    (MessageState.RELEASED, MessageTrigger.CLAIM): MessageState.CLAIMED,
    (MessageState.CLAIMED, MessageTrigger.RELEASE): MessageState.RELEASED,
    (MessageState.CLAIMED, MessageTrigger.CONSUME): MessageState.CONSUMED,
    (MessageState.ACCEPTED, MessageTrigger.DISCARD): MessageState.DISCARDED,
    (MessageState.ADMITTED, MessageTrigger.DISCARD): MessageState.DISCARDED,
    (MessageState.RELEASED, MessageTrigger.DISCARD): MessageState.DISCARDED,
    # The sender's recall and expiry: discards of unclaimed mail, never of claimed.
    (MessageState.ACCEPTED, MessageTrigger.CANCEL): MessageState.DISCARDED,
    (MessageState.ADMITTED, MessageTrigger.CANCEL): MessageState.DISCARDED,
    (MessageState.RELEASED, MessageTrigger.CANCEL): MessageState.DISCARDED,
    (MessageState.ACCEPTED, MessageTrigger.EXPIRE): MessageState.DISCARDED,
    (MessageState.ADMITTED, MessageTrigger.EXPIRE): MessageState.DISCARDED,
    (MessageState.RELEASED, MessageTrigger.EXPIRE): MessageState.DISCARDED,
}
MESSAGE_TRIGGERS = (MessageTrigger.ADMIT, MessageTrigger.CLAIM, MessageTrigger.RELEASE,
                    MessageTrigger.CONSUME, MessageTrigger.DISCARD, MessageTrigger.CANCEL,
                    MessageTrigger.EXPIRE)
FINAL = (MessageState.CONSUMED, MessageState.DISCARDED)

SESSION_STEPS: dict[tuple[str, str], str] = {
    (SessionState.IDLE, SessionTrigger.ENQUEUE): SessionState.QUEUED,
    (SessionState.FINISHED, SessionTrigger.ENQUEUE): SessionState.QUEUED,
    (SessionState.QUEUED, SessionTrigger.START): SessionState.RUNNING,
    (SessionState.RUNNING, SessionTrigger.FINISH): SessionState.FINISHED,
    (SessionState.RUNNING, SessionTrigger.INTERRUPT): SessionState.IDLE,
    (SessionState.QUEUED, SessionTrigger.INTERRUPT): SessionState.IDLE,
}
SESSION_TRIGGERS = (SessionTrigger.ENQUEUE, SessionTrigger.START, SessionTrigger.FINISH,
                    SessionTrigger.INTERRUPT)

RUN_STEPS: dict[tuple[str, str], str] = {
    (RunState.QUEUED, RunTrigger.START): RunState.RUNNING,
    (RunState.RUNNING, RunTrigger.FINISH): RunState.FINISHED,
    (RunState.QUEUED, RunTrigger.INTERRUPT): RunState.INTERRUPTED,
    (RunState.RUNNING, RunTrigger.INTERRUPT): RunState.INTERRUPTED,
}
RUN_TRIGGERS = (RunTrigger.START, RunTrigger.FINISH, RunTrigger.INTERRUPT)

# A run's model request: open or not (the model reads it off ``RunRecord.open_request``).
REQUEST_STEPS: dict[tuple[str, str], str] = {
    (RequestState.NO_REQUEST, RequestTrigger.BEGIN_REQUEST): RequestState.REQUEST_OPEN,
    (RequestState.REQUEST_OPEN, RequestTrigger.COMMIT_REQUEST): RequestState.NO_REQUEST,
    (RequestState.REQUEST_OPEN, RequestTrigger.ABORT_REQUEST): RequestState.NO_REQUEST,
    # A run ends between requests.
    (RequestState.NO_REQUEST, RequestTrigger.END): RequestState.NO_REQUEST,
}
REQUEST_TRIGGERS = (RequestTrigger.BEGIN_REQUEST, RequestTrigger.COMMIT_REQUEST,
                    RequestTrigger.ABORT_REQUEST, RequestTrigger.END)

_TRIGGERS = {id(MESSAGE_STEPS): MESSAGE_TRIGGERS, id(SESSION_STEPS): SESSION_TRIGGERS,
             id(RUN_STEPS): RUN_TRIGGERS, id(REQUEST_STEPS): REQUEST_TRIGGERS}


def step(table: dict[tuple[str, str], str], subject: str, state: str, trigger: str) -> str:
    """The state after ``trigger``, or ``IllegalTransition`` naming what is allowed instead."""
    if (state, trigger) in table:
        return table[(state, trigger)]
    allowed = tuple(t for t in _TRIGGERS[id(table)] if (state, t) in table)
    raise errors.IllegalTransition(subject, trigger, state, allowed)
