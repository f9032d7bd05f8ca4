"""The checks a ``send_message`` call passes, as small functions the engine runs in order.

The order is ``sending.GUARDS`` (mirrored in spec/guards.json), part of the contract: the
first failing check is the answer, so a model always learns about the most basic problem
first.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from treemail.core.config import MessagingConfig
from treemail.core.errors import (
    InboxFull,
    InflightFull,
    InvalidArguments,
    InvalidBody,
    MaxHopsExceeded,
    MessagingDisabled,
)
from treemail.core.records import Mode

__all__ = [
    "SendArguments",
    "check_body",
    "check_enabled",
    "check_hops",
    "check_inbox",
    "check_inflight",
    "parse_arguments",
]

_REQUIRED = ("to", "body")
_ALLOWED = frozenset((*_REQUIRED, "mode"))
_MODES = {mode.value: mode for mode in Mode}


@attrs.frozen
class SendArguments:
    to: str
    body: str
    mode: Mode


def check_enabled(config: MessagingConfig) -> None:
    if not config.enabled:
        raise MessagingDisabled(
            "messaging is disabled by [messaging] enabled = false; tell the user or your "
            "parent instead of retrying"
        )


def parse_arguments(arguments: object) -> SendArguments:
    """Validate the strict argument object: exactly ``to``, ``body`` and optional ``mode``."""
    # A dict first: every call's arguments are one, and an ABC check costs three calls.
    if not isinstance(arguments, dict) and not isinstance(arguments, Mapping):
        raise InvalidArguments(
            'arguments must be an object {"to": ..., "body": ..., "mode"?: "steer"|"queue"}'
        )
    if "recipient_session_id" in arguments:
        raise InvalidArguments(
            "recipient_session_id is not an argument of send_message: it was renamed to `to`; "
            "pass the recipient's handle or session id as `to`"
        )
    # The lists for a refusal are made only for one: a good call asks two set questions.
    if not _ALLOWED.issuperset(arguments):
        unknown = sorted(str(key) for key in arguments if key not in _ALLOWED)
        raise InvalidArguments(
            f"unknown argument(s) {', '.join(unknown)}; send_message takes only to, body, mode"
        )
    if "to" not in arguments or "body" not in arguments:
        missing = [key for key in _REQUIRED if key not in arguments]
        raise InvalidArguments(f"missing required argument(s) {', '.join(missing)}")
    to, body = arguments["to"], arguments["body"]
    if not isinstance(to, str) or not to.strip():
        raise InvalidArguments("`to` must be a non-empty string: a peer's handle or session id")
    if not isinstance(body, str):
        raise InvalidArguments("`body` must be a string")
    if "mode" not in arguments:  # most calls omit it: the default needs no lookup
        return SendArguments(to=to, body=body, mode=Mode.STEER)
    mode = arguments["mode"]
    found = _MODES.get(mode) if isinstance(mode, str) else None  # Mode(mode) costs two calls
    if found is None:
        raise InvalidArguments(f'`mode` must be "steer" or "queue", got {mode!r}')
    return SendArguments(to=to, body=body, mode=found)


def check_body(body: str, config: MessagingConfig) -> None:
    if not body.strip():
        raise InvalidBody("the message body is empty; write what you want to tell the recipient")
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidBody("the message body is not valid Unicode text (lone surrogate)") from None
    if size > config.max_body_bytes:
        raise InvalidBody(
            f"the message body is {size} bytes of UTF-8, over the limit of "
            f"{config.max_body_bytes}; shorten it or send a summary",
            size=size,
            limit=config.max_body_bytes,
        )


def check_hops(hop: int, config: MessagingConfig) -> None:
    """``hop`` is what the new message would carry: the sending run's base hop plus one."""
    if config.max_hops > 0 and hop > config.max_hops:
        raise MaxHopsExceeded(
            f"this message would be hop {hop} of a chain limited to {config.max_hops} hops; "
            "stop relaying and report to your parent instead",
            hop=hop,
            limit=config.max_hops,
        )


def check_inbox(pending_agent_mail: int, config: MessagingConfig) -> None:
    if pending_agent_mail >= config.max_pending_per_session:
        raise InboxFull(
            f"the recipient already holds {pending_agent_mail} unread agent messages and may "
            f"hold at most {config.max_pending_per_session} (max_pending_per_session); "
            "nothing was sent, retry after it has read its mail",
            pending=pending_agent_mail,
            limit=config.max_pending_per_session,
        )


def check_inflight(pair_pending: int, config: MessagingConfig) -> None:
    limit = config.max_inflight_per_pair
    if limit > 0 and pair_pending >= limit:
        raise InflightFull(
            f"you already have {pair_pending} unacknowledged messages to this recipient, the "
            "limit per pair; wait for it to read them before sending more",
            pending=pair_pending,
            limit=limit,
        )
