"""The reference model's addressing, permissions and envelope, re-stated from the contract:
what is a session id, which rule decides a label, and the exact text a recipient reads.
Re-stated on purpose instead of importing the core's (see ``treemail.models.world``, which
re-exports them).
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata

from treemail.core.permissions import Action, Rules

__all__ = [
    "can_send",
    "decide",
    "defuse",
    "envelope",
    "interrupted_notice",
    "looks_like_uuid",
    "one_line",
    "subagent_notice",
]


# -- addressing, permissions and the envelope, re-stated from the contract ---------------------

_HEX = "[0-9a-fA-F]"
_UUID = re.compile(f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}")


def looks_like_uuid(reference: str) -> bool:
    """Only the whole 8-4-4-4-12 spelling is a session id; anything else is a handle."""
    return _UUID.fullmatch(reference) is not None


_STRICTNESS = {Action.ALLOW: 0, Action.ASK: 1, Action.DENY: 2}


def decide(rules: Rules, label: str) -> Action:
    """Exact label beats wildcard, longer wildcard beats shorter, a tie goes to the strictest
    action (deny > ask > allow); no matching rule means deny."""
    exact = [r.action for r in rules.rules if not _is_wildcard(r.pattern) and r.pattern == label]
    if exact:
        return _strictest(exact)
    wild = [r for r in rules.rules
            if _is_wildcard(r.pattern) and fnmatch.fnmatchcase(label, r.pattern)]
    if not wild:
        return Action.DENY
    longest = max(len(r.pattern) for r in wild)
    return _strictest([r.action for r in wild if len(r.pattern) == longest])


def _is_wildcard(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _strictest(actions: list[Action]) -> Action:
    return max(actions, key=lambda a: _STRICTNESS[a])


def can_send(rules: Rules) -> bool:
    """send_message is shown only when some rule is allow or ask."""
    return any(r.action is not Action.DENY for r in rules.rules)


def envelope(sender_reference: str, body: str, reply_hint: bool) -> str:
    """The contract's Message Envelope, byte for byte, with the body's tag-like text defused."""
    lines = [f'<agent_message from="{sender_reference}">', defuse(body)]
    if reply_hint:
        lines += ["", f'[use `send_message(to="{sender_reference}", ...)` to reply]']
    lines.append("</agent_message>")
    return "\n".join(lines)


def subagent_notice(child_reference: str, result: str) -> str:
    """What a parent reads when its child's delegation completes."""
    return "\n".join((f'<subagent_result from="{child_reference}">', defuse(result),
                      "</subagent_result>"))


# spec/envelope.md: a bracket (or a lookalike of it) opens a tag-like token when the text
# after it, read as case-folded compatibility letters of what a reader can see, begins with
# one of the token's names; such a bracket is shown as its escape.
_TOKENS = (("<\ufe64\uff1c\u2039\u2329\u3008\u27e8", "&lt;", ("agentmessage", "subagentresult")),
           ("[\ufe47\uff3b", "&#91;", ("usesendmessage",)))
# What a reader sees between brackets and letters: letters, digits, symbols and punctuation,
# except dashes and connectors (Pd, Pc), the backtick and the slash, and the letters that
# draw nothing (Hangul fillers, the blank braille cell). Controls, format characters, marks,
# spaces and code points with no character are passed over.
_SEEN = ("Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No", "Sm", "Sc", "Sk", "So",
         "Ps", "Pe", "Pi", "Pf", "Po")
_PASSED_OVER = "`/\u115f\u1160\u3164\uffa0\u2800"


def defuse(body: str) -> str:
    """The body as a recipient is shown it: honest text unchanged."""
    folded = [_fold(char) for char in body]
    out = list(body)
    for index, char in enumerate(body):
        for brackets, escape, names in _TOKENS:
            if char in brackets and _begins_with(folded, index + 1, names):
                out[index] = escape
    return "".join(out)


def _seen(char: str) -> bool:
    return unicodedata.category(char) in _SEEN and char not in _PASSED_OVER


def _fold(char: str) -> str:
    """A character's letters as a reader takes them: decomposed, case-folded, decomposed
    again (folding can compose), and only what is seen kept (accents go)."""
    if not _seen(char):
        return ""
    letters = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", char).casefold())
    return "".join(c for c in letters if _seen(c))


def _begins_with(folded: list[str], start: int, names: tuple[str, ...]) -> bool:
    seen = ""
    for letters in folded[start:]:
        seen += letters
        if any(seen.startswith(name) for name in names):
            return True
        if not any(name.startswith(seen) for name in names):
            return False
    return False


# A description is shown as a single line of a candidate list, cut at 200 characters.
_DESCRIPTION_WIDTH = 200


def one_line(description: str) -> str:
    """A peer's description as a candidate list shows it: line breaks and control characters
    become spaces, format characters vanish, blank runs are one space, the line is defused,
    and a longer one is cut to 199 characters and an ellipsis."""
    kept = []
    for char in description:
        kind = unicodedata.category(char)
        if kind == "Cf":
            continue
        kept.append(" " if kind in ("Cc", "Zl", "Zp") else char)
    shown = defuse(" ".join("".join(kept).split()))
    if len(shown) > _DESCRIPTION_WIDTH:
        shown = shown[:_DESCRIPTION_WIDTH - 1] + "\u2026"
    return shown


def interrupted_notice(reason: str) -> str:
    """The result a parent is shown for a child whose run stopped without one."""
    return "(no result: the run was interrupted: " + reason + ")"
