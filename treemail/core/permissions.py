"""Message permissions: relationship labels matched against allow / ask / deny rules.

The label names the recipient as seen from the sender (``parent``, ``child``, ``sibling``,
else ``*``). It is only a label: no relationship grants authority by itself, the rules alone
decide, and no matching rule means deny.

Precedence, so that a rule set reads the way people expect: an exact label beats any
wildcard; among wildcards the longer pattern is more specific and wins; at equal length the
more restrictive action wins (deny over ask over allow), so a tie can never widen access.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
from collections.abc import Iterable, Mapping

import attrs

from treemail.core.errors import AgentDocError

__all__ = [
    "LABELS",
    "Action",
    "Rule",
    "Rules",
    "relationship",
]

LABELS = ("parent", "child", "sibling", "*")
_WILDCARDS = frozenset("*?[")


class Action(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


_RESTRICTIVENESS = {Action.ALLOW: 0, Action.ASK: 1, Action.DENY: 2}


@attrs.frozen
class Rule:
    pattern: str
    action: Action

    @property
    def exact(self) -> bool:
        return not (_WILDCARDS & set(self.pattern))

    def matches(self, label: str) -> bool:
        return self.pattern == label if self.exact else fnmatch.fnmatchcase(label, self.pattern)

    def precedence(self) -> tuple[int, int, int]:
        return (int(self.exact), len(self.pattern), _RESTRICTIVENESS[self.action])


@attrs.frozen
class Rules:
    """An agent's ``permissions.message`` rules."""

    rules: tuple[Rule, ...] = ()

    @classmethod
    def parse(cls, table: Mapping[object, object] | None, source: str = "<rules>") -> Rules:
        """Read ``{label pattern: allow|ask|deny}``; a bad entry names the source and field."""
        if table is None:
            return cls()
        if not isinstance(table, Mapping):
            raise AgentDocError(
                f"{source}: permissions.message must be a mapping of label to allow|ask|deny",
                source=source,
                field="permissions.message",
                problem="bad_rules",
            )
        return cls(tuple(_parse_rule(pattern, action, source) for pattern, action in table.items()))

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]] | Mapping[str, str]) -> Rules:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        return cls(tuple(_parse_rule(p, a, "<rules>") for p, a in items))

    def decide(self, label: str) -> Action:
        """The action for ``label``: the most specific matching rule, else deny."""
        # Remembered by this rule set's identity (the entry keeps it alive, so the id is not
        # reused while the entry stands): a session's rules are one record across its sends
        # (a store decodes a steady row once), and ``_decide``'s key hashes every rule, two
        # calls each (attrs' ``__hash__`` and ``hash``), at every decision.
        global _DECIDED
        key, decided = (id(self), label), _DECIDED
        if key in decided and decided[key][0] is self:  # membership: no call
            return decided[key][1]
        action = _decide(self.rules, label)
        if len(decided) >= _DECIDED_LIMIT:
            # A new dict, not the old one cleared: a thread between its membership test and
            # its lookup holds the old one, where its entry still is.
            _DECIDED = decided = {}
        decided[key] = (self, action)
        return action

    @property
    def visible(self) -> bool:
        """send_message is shown to the model only when some rule could let a send through."""
        return any(rule.action is not Action.DENY for rule in self.rules)


# The decisions of the rule sets in use, by the set's identity and the label (``decide``).
_DECIDED: dict[tuple[int, str], tuple[Rules, Action]] = {}
_DECIDED_LIMIT = 1024


# Every send decides once; the rule sets and labels in use are few, and a decision depends
# on nothing else, so it is remembered instead of matching patterns again.
@functools.lru_cache(maxsize=1024)
def _decide(rules: tuple[Rule, ...], label: str) -> Action:
    matching = [rule for rule in rules if rule.matches(label)]
    if not matching:
        return Action.DENY
    return max(matching, key=Rule.precedence).action


def _parse_rule(pattern: object, action: object, source: str) -> Rule:
    field = f"permissions.message.{pattern}"
    if not isinstance(pattern, str) or not pattern:
        raise AgentDocError(
            f"{source}: {field}: a rule's label must be a non-empty string",
            source=source,
            field=field,
            problem="bad_label",
        )
    try:
        return Rule(pattern, Action(action if isinstance(action, str) else repr(action)))
    except ValueError:
        raise AgentDocError(
            f"{source}: {field}: action must be allow, ask or deny, got {action!r}",
            source=source,
            field=field,
            problem="bad_rule_action",
        ) from None


def relationship(
    sender_id: str,
    sender_parent: str | None,
    recipient_id: str,
    recipient_parent: str | None,
) -> str:
    """The recipient's label as seen from the sender, from stored origin metadata only."""
    if recipient_id == sender_parent:
        return "parent"
    if recipient_parent == sender_id:
        return "child"
    if sender_parent is not None and recipient_parent == sender_parent:
        return "sibling"
    return "*"
