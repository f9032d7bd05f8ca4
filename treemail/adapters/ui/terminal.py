"""Text bound for an operator's terminal, made inert.

Mail bodies, model output, descriptions and reasons are written by agents, plugins and model
endpoints. Sent to a terminal as written, their control characters are commands: ESC starts
sequences that set the window title, write the clipboard (OSC 52) or erase rows already shown
(which can hide an approval), BEL rings, CR returns to the line's start and overwrites it, and
bidi controls reorder what follows. ``visible`` shows each such character as its escape
(``\\x1b``, ``\\u202e``), so a row reads as what was sent and does nothing else. It is applied
where rows are made (``transcript.Row``) and to every other piece of outside text the CLI and
the TUI print.
"""

from __future__ import annotations

import unicodedata

__all__ = ["visible"]

# Explicit bidi controls: they reorder the text around them (spoofed file names, hidden code).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Controls (C0, DEL, C1 including the 8-bit CSI), lone surrogates (no terminal encoding holds
# them) and the line and paragraph separators (some terminals break the line).
_ESCAPED_CATEGORIES = frozenset(("Cc", "Cs", "Zl", "Zp"))


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with every control character shown as its escape; printable text unchanged.
    Idempotent: an escape is printable, so showing a shown text changes nothing."""
    if text.isprintable():  # the common case: nothing to look at
        return text
    return "".join(_escape(c) if c in _BIDI or unicodedata.category(c) in _ESCAPED_CATEGORIES
                   else c for c in text)
