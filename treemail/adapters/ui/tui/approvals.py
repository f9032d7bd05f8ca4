"""The TUI's approvals pane: the ``ask`` sends held for the user, and the keys that answer
them (the app's ``answer`` and ``deny`` actions), bound to this pane alone."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from treemail.adapters.ui.terminal import visible

__all__ = ["Approvals", "question"]


class Approvals(DataTable[Text]):
    """The held calls. The keys that answer them work here only, with this pane focused: a
    letter typed elsewhere (a search word, a stray key) answers nothing."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "app.answer('once')", "Approve once"),
        Binding("s", "app.answer('session')", "Approve session…"),
        Binding("t", "app.answer('tree')", "Approve tree…"),
        Binding("d", "app.deny", "Deny…"),
    ]


def question(held: dict[str, Any], sender: str, scope: str) -> str:
    """What a wide approval of ``held`` (sent by the session whose handle is ``sender``)
    grants, said before it is granted."""
    whom = (f"sent by {sender}" if scope == "session"
            else f"sent by any session of {sender}'s tree")
    arguments = held.get("arguments") or {}
    return visible(
        f"Approve {held['tool']} to {arguments.get('to', '?')}, and from now on every "
        f"{held['tool']} to a {held['label']} peer {whom}, without asking ({scope} "
        "scope)?")
