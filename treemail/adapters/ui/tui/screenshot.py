"""The TUI's screen as plain text, whole or one pane, for snapshots and tests: Textual exports
screenshots only as SVG."""

from __future__ import annotations

from typing import Any

from textual.app import App

__all__ = ["pane_text", "screen_text"]


def screen_text(app: App[Any]) -> str:
    """The whole screen as plain text. Textual exports screenshots only as SVG; this renders
    the same composition (its compositor's strips) as text instead."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)


def pane_text(app: App[Any], selector: str) -> str:
    """One pane, border included, as plain text: its region of the screen (for snapshots)."""
    box = app.query_one(selector).region
    lines = screen_text(app).split("\n")[box.y: box.y + box.height]
    return "\n".join(line[box.x: box.x + box.width].rstrip() for line in lines)
