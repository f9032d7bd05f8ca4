"""The one way text from outside enters a model's context (spec/envelope.md).

Everything a model reads that someone else wrote passes through here: agent mail in its
envelope, a child's result or interruption in a ``<subagent_result>``, user, plugin and goal
mail and delegation tasks as plain text, a peer's description as one bounded line, and tool
results. The store keeps every text exactly as its producer wrote it; rendering happens when
a model request is built, so a rule fixed here reaches mail already stored.

Integrity: a text may be written by a confused or hostile agent, plugin or model endpoint, so
anything in it that a reader would take for an envelope tag (``<agent_message``,
``</subagent_result>``, in any case, spaced out, with invisible characters or lookalike
brackets in it) or for the reply hint is *neutralised*: its opening ``<`` becomes ``&lt;`` and
its opening ``[`` becomes ``&#91;``. A text without such a token renders byte-identical to the
contract's vectors; with it, the recipient still sees only the envelopes real senders made.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator

from treemail.core.records import Owner

__all__ = [
    "MAX_DESCRIPTION",
    "interruption_result",
    "neutralise",
    "render_description",
    "render_envelope",
    "render_mail",
    "render_plain",
    "render_subagent_result",
    "render_tool_result",
]

# A bracket that opens a tag-like token -> what it is rendered as, and the letters that must
# follow it (after folding, with separators and invisible characters skipped) for the token
# to count. Lookalikes: every character whose NFKC form is '<' or '[' (a test recomputes this
# set over all of Unicode), plus the angle brackets a reader takes for '<'.
_LESS_THAN = "<\ufe64\uff1c\u2039\u2329\u3008\u27e8"
_BRACKET = "[\ufe47\uff3b"
_OPENERS = {**dict.fromkeys(_LESS_THAN, "&lt;"), **dict.fromkeys(_BRACKET, "&#91;")}
_NAMES = {"&lt;": ("agentmessage", "subagentresult"), "&#91;": ("usesendmessage",)}
# Skipped anywhere inside a token besides dashes and connectors: a reader's eye passes them.
_SEPARATORS = frozenset("`/")
# Letters that draw nothing: the Hangul fillers and the blank braille cell. Every other
# invisible code point (zero-width, joiners, bidi marks, soft hyphen, variation selectors,
# tags) is a control, format, mark or separator and is skipped by its category.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_CANDIDATE = re.compile(f"[{re.escape(''.join(_OPENERS))}]")

# A description is shown on one line of a candidate list, among up to twenty peers.
MAX_DESCRIPTION = 200


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


def interruption_result(reason: str) -> str:
    """What a parent is told, as its child's result, when the child's run stopped without
    one; ``reason`` may hold a model endpoint's error text and is neutralised when shown."""
    return f"(no result: the run was interrupted: {reason})"


def render_plain(text: str) -> str:
    """User, plugin and goal mail and a delegation task: no envelope (no agent sent it), but
    nothing in it may pose as one."""
    return neutralise(text)


# Read once: under Python 3.11 a member read through its class goes through
# ``EnumType.__getattr__``'s hook, about ten times the cost of reading a global.
_AGENT, _DELEGATION = Owner.AGENT, Owner.DELEGATION


def render_mail(owner: Owner, body: str, *, sender_reference: str | None,
                from_child: bool, reply_hint: bool) -> str:
    """A stored message as its recipient's model reads it. ``sender_reference`` names the
    sending session, if any; ``from_child`` says that session is a child of the recipient,
    so that delegation mail from it is the child's result."""
    if owner is _AGENT and sender_reference is not None:
        return render_envelope(sender_reference, body, reply_hint=reply_hint)
    if owner is _DELEGATION and from_child and sender_reference is not None:
        return render_subagent_result(sender_reference, body)
    return render_plain(body)


def render_description(text: str) -> str:
    """A session's description as one line of a candidate list: controls, line breaks and
    blank runs folded to one space, nothing tag-like, at most ``MAX_DESCRIPTION`` characters."""
    line = " ".join("".join(_fold_control(char) for char in text).split())
    shown = neutralise(line)  # after folding: a control may have hidden a token's spacing
    if len(shown) <= MAX_DESCRIPTION:
        return shown
    return shown[: MAX_DESCRIPTION - 1] + "…"


def render_tool_result(content: str) -> str:
    """A tool result's JSON text: a child's output, a plugin's refusal or a peer's
    description may be quoted in it."""
    return neutralise(content)


def _fold_control(char: str) -> str:
    category = unicodedata.category(char)
    if category in ("Cc", "Zl", "Zp"):
        return " "
    return "" if category == "Cf" else char


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


def _unseen(char: str) -> bool:
    """Whether ``char`` adds nothing a reader sees between two letters: every control,
    format, surrogate, private-use and unassigned code point (C*), every combining mark
    (M*), every space and line separator (Z*), dashes and connectors (Pd, Pc), and the
    letters that draw nothing."""
    category = unicodedata.category(char)
    return (category[0] in "CMZ" or category in ("Pd", "Pc") or char.isspace()
            or char in _BLANK_LETTERS or char in _SEPARATORS)


# Pure, and a text repeats few characters: cached, a bracket-heavy text is read in about 0.7
# of the time. (A test that swaps ``_unseen`` clears the cache around the swap.)
@functools.lru_cache(maxsize=4096)
def _letters(char: str) -> str:
    """What ``char`` contributes to a tag name: its compatibility decomposition, case-folded,
    with marks, separators and invisible characters removed (``Ａ`` -> ``a``, ``ß`` -> ``ss``,
    ``á`` -> ``a``, a soft hyphen or a zero-width joiner -> nothing)."""
    if _unseen(char):
        return ""
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", char).casefold())
    return "".join(c for c in folded if not _unseen(c))
