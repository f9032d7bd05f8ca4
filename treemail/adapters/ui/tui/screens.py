"""The TUI's modal screens: confirming a wide approval, denying with a reason, one row read
whole, and the list of keys. Each is dismissed with its answer (or None, on escape)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

__all__ = ["KEYS", "Confirm", "Deny", "Detail", "Help"]

# Every key of the app, where it works, and what it does: the help screen shows this list.
KEYS: tuple[tuple[str, str, str], ...] = (
    ("tab / shift+tab", "anywhere", "move between the panes"),
    ("up / down", "a pane", "move in it; in the tree, pick a session"),
    ("enter", "transcript", "read the row whole (its message, its output)"),
    ("/", "anywhere", "search the transcript"),
    ("n / N", "transcript", "next / previous match"),
    ("w", "anywhere", "wrap the transcript's rows to the pane, or one line a row again"),
    ("a", "approvals", "approve the held call, this once"),
    ("s", "approvals", "approve its kind for the sending session (asks first)"),
    ("t", "approvals", "approve its kind for the whole tree (asks first)"),
    ("d", "approvals", "deny it, with a reason the agent reads"),
    ("?", "anywhere", "this list"),
    ("escape", "a dialog", "close it, answering nothing"),
    ("q", "anywhere", "quit"),
)

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical, {name} > VerticalScroll {{
    width: 80%; height: auto; max-height: 90%; border: thick $primary; background: $surface;
    padding: 0 1;
}}
"""


class Confirm(ModalScreen[bool]):
    """A yes/no question; ``y`` or enter says yes, ``n`` or escape says no."""

    DEFAULT_CSS = _CSS.format(name="Confirm")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "dismiss(True)", "Yes"),
        Binding("n,escape", "dismiss(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question), id="question")
            yield Static(Text("y: yes    n / escape: no", style="bold"))


class Deny(ModalScreen[str | None]):
    """The reason for a deny, which the agent reads in its tool result; enter denies (an
    empty reason is allowed), escape denies nothing."""

    DEFAULT_CSS = _CSS.format(name="Deny")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(f"Deny {self.what}?"))
            yield Input(placeholder="why (the agent reads this); enter denies, escape keeps it",
                        id="reason")

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        message.stop()  # the app's own search box answers its own submits, not this one
        self.dismiss(message.value.strip())


class Detail(ModalScreen[None]):
    """One transcript row read whole: its heading, then every line of it, wrapped."""

    DEFAULT_CSS = _CSS.format(name="Detail") + "#body { height: auto; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "dismiss(None)", "Close"),
    ]

    def __init__(self, heading: str, body: str) -> None:
        super().__init__()
        self.heading = heading
        self.body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Static(Text(self.heading, style="bold"), id="heading")
            yield Static(Text(self.body, overflow="fold"), id="body")
            yield Static(Text("escape / enter: close", style="dim"))


class Help(ModalScreen[None]):
    """The keys, where each works, what it does."""

    DEFAULT_CSS = _CSS.format(name="Help")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss(None)", "Close"),
    ]

    def compose(self) -> ComposeResult:
        width = max(len(key) for key, _, _ in KEYS)
        rows = "\n".join(f"{key:<{width}}  {where:<10}  {what}" for key, where, what in KEYS)
        with Vertical():
            yield Static(Text("keys", style="bold"))
            yield Static(Text(rows))
