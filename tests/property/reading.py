"""How a lenient reader finds envelopes in what a model is shown (spec/envelope.md).

Written here apart from the renderer, and more lenient than its rule: the whole text is
decomposed (NFKD) and case-folded at once; every control, format, surrogate, private-use and
unassigned code point, every combining mark and the blank letters are dropped; every space,
dash and connector is a separator; the angle-bracket lookalikes read as ``<``. Any
bracket followed by an envelope name, its letters spread with separators, is a tag.
"""

from __future__ import annotations

import re
import unicodedata

import attrs

__all__ = ["NAMES", "Reading", "closest", "normalised", "read_tags"]

NAMES = ("agent_message", "subagent_result")
_SEP = r"[\s_\-`/]*"
_BLANK = "\u115f\u1160\u3164\uffa0\u2800"


def _token(bracket: str, name: str) -> re.Pattern[str]:
    return re.compile(re.escape(bracket) + _SEP + _SEP.join(map(re.escape, name)))


_TAGS = {kind: _token("<", kind.replace("_", "")) for kind in NAMES}
_HINT = _token("[", "usesendmessage")
_FROM = re.compile(r'\s*from\s*=\s*"([^"]*)"')
_HINT_TO = re.compile(r'\s*\(\s*to\s*=\s*"([^"]*)"')
_LOOKALIKES = str.maketrans("\u2039\u3008\u27e8\u2329", "<<<<")


@attrs.frozen
class Reading:
    """What a reader takes from a rendering: each tag (kind, from or None, offset), each hint
    target, and the text's length (to tell "closed last")."""

    tags: tuple[tuple[str, str | None, int], ...]
    hints: tuple[str | None, ...]
    length: int


def normalised(text: str) -> str:
    """``text`` as the reader sees it."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if category[0] in "CM" or char in _BLANK:
            continue
        kept.append("-" if category in ("Pd", "Pc") else char)
    return "".join(kept).translate(_LOOKALIKES)


def read_tags(rendered: str) -> Reading:
    text = normalised(rendered)
    tags = []
    for kind, pattern in _TAGS.items():
        for match in pattern.finditer(text):
            sender = _FROM.match(text, match.end())
            tags.append((kind, sender.group(1) if sender else None, match.start()))
    hints = []
    for match in _HINT.finditer(text):
        target = _HINT_TO.match(text, match.end())
        hints.append(target.group(1) if target else None)
    return Reading(tuple(sorted(tags, key=lambda tag: tag[2])), tuple(hints), len(text))


_SPREAD = re.compile(r"[\s_\-`/]+")


def closest(shown: str) -> int:
    """How many letters of an envelope name the reader finds right after some ``<`` of
    ``shown`` (a body as rendered, without its envelope), at most: how near it comes to
    showing a tag (for ``hypothesis.target``)."""
    text = _SPREAD.sub("", normalised(shown))
    best = 0
    for start in (m.end() for m in re.finditer("<", text)):
        for name in ("agentmessage", "subagentresult"):
            matched = 0
            while matched < len(name) and text[start + matched:start + matched + 1] == \
                    name[matched]:
                matched += 1
            best = max(best, matched)
    return best
