"""Colours of transcript rows, shared by the CLI (rich) and the TUI (Textual renders rich
text), so a row looks the same in both. Colour is only ever added to a row's plain text:
stripping it gives exactly ``Row.line()``, which is what scripts and tests read."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from treemail.adapters.ui.transcript import Row, Tone
from treemail.core.lifecycle import MessageState

__all__ = ["MAIL_STYLES", "TONE_STYLES", "row_style", "styled_line", "styled_text"]

TONE_STYLES: Mapping[Tone, str] = {
    Tone.MAIL: "bold", Tone.SESSION: "magenta", Tone.RUN: "blue", Tone.REQUEST: "dim",
    Tone.MODEL: "cyan", Tone.TOOL: "dim cyan", Tone.APPROVAL: "bold yellow",
    Tone.UNKNOWN: "red",
}
_M = MessageState
MAIL_STYLES: Mapping[str, str] = {
    _M.ACCEPTED: "bold white", _M.ADMITTED: "white", _M.CLAIMED: "yellow",
    _M.RELEASED: "magenta", _M.CONSUMED: "green", _M.DISCARDED: "bold red",
}


def row_style(row: Row) -> str:
    if row.state is not None:
        return MAIL_STYLES.get(row.state, "bold")
    return TONE_STYLES[row.tone]


def styled_text(row: Row) -> Text:
    """The row's text (no who, no seq), coloured by what it is about."""
    return Text(row.text, style=row_style(row))


def styled_line(row: Row) -> Text:
    """``Row.line()``, coloured: the session dim, the text by its tone or mail state."""
    line = Text()  # no base style: it would mix into every span appended
    line.append(f"  {row.who:<22} ", style="dim")
    line.append(f"#{row.seq:<3} ", style="dim")
    line.append_text(styled_text(row))
    return line
