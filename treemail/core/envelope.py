"""How agent mail and delegation results appear in the recipient's prompt.

The body is kept exactly as written in the store; only the envelope and, when the recipient
can answer, the reply hint are added. Ids, hop counts and other delivery metadata stay in the
event record and never reach the model.

Integrity (spec/envelope.md): a body may be written by a confused or hostile agent, so text in
it that a reader would take for an envelope tag (``<agent_message``, ``</subagent_result>``,
in any case, spaced out, with lookalike brackets) or for the reply hint is *neutralised* at
rendering: its opening ``<`` becomes ``&lt;`` and its opening ``[`` becomes ``&#91;``. A body
without such text renders byte-identical to the contract's vectors; with it, the recipient
still sees exactly one envelope and the true sender.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

__all__ = ["neutralise", "render_envelope", "render_subagent_result"]

# A bracket that opens a tag-like token -> what it is rendered as, and the letters that must
# follow it (after case folding, with separators skipped) for the token to count.
# Lookalikes: every character whose NFKC form is '<' or '[' (a test recomputes this set over
# all of Unicode), plus the angle brackets a reader takes for '<'.
_LESS_THAN = "<\ufe64\uff1c\u2039\u2329\u3008\u27e8"
_BRACKET = "[\ufe47\uff3b"
_OPENERS = {**dict.fromkeys(_LESS_THAN, "&lt;"), **dict.fromkeys(_BRACKET, "&#91;")}
_NAMES = {"&lt;": ("agentmessage", "subagentresult"), "&#91;": ("usesendmessage",)}
# Skipped anywhere inside a token: a reader's eye passes over them.
_SEPARATORS = frozenset("_-`/")
_CANDIDATE = re.compile(f"[{re.escape(''.join(_OPENERS))}]")


def render_envelope(sender_reference: str, body: str, *, reply_hint: bool) -> str:
    """Render agent mail from ``sender_reference`` (a handle, or the UUID of a legacy session)."""
    opening = f'<agent_message from="{sender_reference}">'
    shown = neutralise(body)
    if reply_hint:
        hint = f'[use `send_message(to="{sender_reference}", ...)` to reply]'
        return f"{opening}\n{shown}\n\n{hint}\n</agent_message>"
    return f"{opening}\n{shown}\n</agent_message>"


def render_subagent_result(child_reference: str, result: str) -> str:
    """The notice a parent receives when its delegated child finishes with ``result``."""
    return f'<subagent_result from="{child_reference}">\n{neutralise(result)}\n</subagent_result>'


def neutralise(body: str) -> str:
    """``body`` with the opening bracket of every tag-like token escaped; else ``body`` itself."""
    if _CANDIDATE.search(body) is None:  # the honest common case: nothing to look at
        return body
    parts: list[str] = []
    start = 0
    for index in _tokens(body):
        parts += [body[start:index], _OPENERS[body[index]]]
        start = index + 1
    parts.append(body[start:])
    return "".join(parts)


def _tokens(body: str) -> Iterator[int]:
    """Index of the opening bracket of every tag-like token in ``body``."""
    for match in _CANDIDATE.finditer(body):
        index = match.start()
        if _spells_name(body, index + 1, _NAMES[_OPENERS[body[index]]]):
            yield index


def _spells_name(body: str, start: int, names: tuple[str, ...]) -> bool:
    """Whether the text from ``start`` spells one of ``names``, folded, separators skipped."""
    read = ""
    for position in range(start, len(body)):  # not a slice: no copy per candidate
        read += _letters(body[position])
        if any(name == read[: len(name)] for name in names if len(read) >= len(name)):
            return True
        if not any(name.startswith(read) for name in names):
            return False
    return False


def _letters(char: str) -> str:
    """What ``char`` contributes to a tag name: its compatibility-folded, case-folded letters,
    minus separators, whitespace and invisible format characters (zero-width and the like)."""
    if char.isspace() or unicodedata.category(char) == "Cf":
        return ""
    folded = unicodedata.normalize("NFKC", char).casefold()
    return "".join(c for c in folded if c not in _SEPARATORS and not c.isspace())
