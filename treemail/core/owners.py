"""Who produced a message, as its events record it: one variant per ``Owner``, and for
agent mail the sending session, so an event's owner can never name agent mail without
saying whose it is. Stored flat (the ``Owner`` value, with agent mail's session in the
event's ``sender``); ``events`` reads the variant back with ``owner_from``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, TypeAlias

import attrs

from treemail.core.records import Message, Owner
from treemail.core.shapes import Unfit

__all__ = [
    "AgentOwner",
    "DelegationOwner",
    "GoalOwner",
    "MailOwner",
    "PluginOwner",
    "UserOwner",
    "owner_from",
    "owner_of",
]


@attrs.frozen
class AgentOwner:
    """Agent mail, sent with send_message by the agent of ``session_id``."""

    session_id: str
    OWNER: ClassVar[Owner] = Owner.AGENT


@attrs.frozen
class UserOwner:
    """A user turn."""

    OWNER: ClassVar[Owner] = Owner.USER


@attrs.frozen
class PluginOwner:
    """Mail a plugin injected with accept."""

    OWNER: ClassVar[Owner] = Owner.PLUGIN


@attrs.frozen
class DelegationOwner:
    """A delegated task (from the parent) or a delegation's result (from the child)."""

    OWNER: ClassVar[Owner] = Owner.DELEGATION


@attrs.frozen
class GoalOwner:
    """Mail a goal produced."""

    OWNER: ClassVar[Owner] = Owner.GOAL


MailOwner: TypeAlias = AgentOwner | UserOwner | PluginOwner | DelegationOwner | GoalOwner
_PLAIN_OWNERS: Mapping[Owner, MailOwner] = {
    o.OWNER: o() for o in (UserOwner, PluginOwner, DelegationOwner, GoalOwner)
}


def owner_of(message: Message) -> MailOwner:
    """The owner variant of a stored message: agent mail names its sending session."""
    if message.owner is Owner.AGENT:
        if message.sender is None:
            raise ValueError(f"agent mail {message.message_id} has no sender")
        return AgentOwner(message.sender)
    return _PLAIN_OWNERS[message.owner]


def owner_from(owner: Owner, sender: str | None) -> MailOwner:
    """The owner variant a stored event's flat fields name; ``Unfit`` for agent mail
    without its sender (``events.read`` then reads the entry as unknown)."""
    if owner is not Owner.AGENT:
        return _PLAIN_OWNERS[owner]
    if sender is None:
        raise Unfit("agent mail without a sender")
    return AgentOwner(sender)
