"""``treemail tui``: watch a tree of agents converse, and answer their approvals.

Three panes: the sessions of the tree (by parent links: handle, agent, state, pending mail,
whether it is live or a ghost of a reverted branch), the transcript of the selected session
(one row per message, its lifecycle state updated in place, model output and tool calls in
log order), and the ``ask`` sends held for the user. Everything shown is folded from the feed
by ``Board``, the same rows ``treemail tail`` and ``treemail replay`` print, so a thousand
sessions cost no more calls than one: nothing is polled. On a store with no daemon it is a
read-only replay.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Input, Static, Tree
from textual.widgets.tree import TreeNode

from treemail.adapters.daemon.client import RpcFailure
from treemail.adapters.ui.commands import answer_line
from treemail.adapters.ui.styles import styled_text
from treemail.adapters.ui.terminal import visible
from treemail.adapters.ui.transcript import Row
from treemail.adapters.ui.tui.board import Board
from treemail.adapters.ui.tui.sources import Source, choose
from treemail.core import events
from treemail.core.errors import TreemailError
from treemail.core.records import Event

__all__ = ["ALL", "MATCH", "TreemailTui", "main", "pane_text", "screen_text"]

ALL = ""  # the tree's root: the transcript pane shows every session's rows
MATCH = "bold black on yellow"  # a search match within a transcript row

_APPROVAL_KINDS = (events.ApprovalRequested, events.ApprovalAnswered)


class TreemailTui(App[None]):
    TITLE = "treemail"
    # The approvals pane spans the width under both: a held send's body is the long cell.
    CSS = """
    #sessions { width: 40%; border: round $primary; }
    #right { width: 60%; }
    #transcript { height: 1fr; border: round $secondary; }
    #search { dock: bottom; }
    #status { height: 1; }
    #approvals { height: 8; border: round $warning; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "answer('once')", "Approve once"),
        Binding("s", "answer('session')", "Approve session"),
        Binding("t", "answer('tree')", "Approve tree"),
        Binding("d", "deny", "Deny"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match", "Next match"),
        Binding("tab", "focus_next", "Next pane", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, source: Source) -> None:
        super().__init__()
        self.source = source
        self.board = Board()
        self.selected = ALL
        self.nodes: dict[str, TreeNode[str]] = {}
        self.held: list[dict[str, Any]] = []
        self.query_text = ""
        self.ready = asyncio.Event()  # the backlog is shown (tests wait on it)
        self.sub_title = ("replay (read-only): " if source.read_only else "live: ") + source.where

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield Tree[str]("all sessions", ALL, id="sessions")
            with Vertical(id="right"):
                yield DataTable(id="transcript", cursor_type="row")
                yield Static("", id="status")
                yield Input(placeholder="/ search the transcript", id="search")
        yield DataTable(id="approvals", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        sessions = self.query_one("#sessions", Tree)
        sessions.root.expand()
        sessions.border_title = "sessions"
        transcript = self.query_one("#transcript", DataTable)
        transcript.add_columns("session", "#", "row")
        transcript.border_title = "transcript"
        approvals = self.query_one("#approvals", DataTable)
        approvals.add_columns("sender", "recipient", "label", "body")
        approvals.border_title = "approvals: held ask sends"
        self.run_worker(self._follow(), name="follow", exit_on_error=False)

    # -- the feed ------------------------------------------------------------------------

    async def _follow(self) -> None:
        try:
            await self.source.open()
            await self._refresh_approvals()
            head = await self.source.subscribe()
            if head == 0:
                self._caught_up()
            async for number, event in self.source.events():
                self._fold(number, event)
                if number >= head and not self.ready.is_set():
                    self._caught_up()
                if isinstance(events.read(event), _APPROVAL_KINDS):
                    await self._refresh_approvals()
        except (OSError, RpcFailure, TreemailError) as exc:  # ConnectionError is an OSError
            self._say(f"not following {self.source.where}: {exc}")
            self.sub_title = f"stopped: {self.source.where}"
        self.ready.set()

    def _caught_up(self) -> None:
        """The backlog is shown; from now on every event is live."""
        # Until a session is picked the status line says what is shown and how to go on.
        shown = "replayed" if self.source.read_only else "live"
        self._say(f"{len(self.board.sessions)} sessions, {self.board.last} events {shown}: "
                  "pick a session in the tree, / to search")
        self.ready.set()

    def _fold(self, number: int, event: Event) -> None:
        row = self.board.add(number, event)
        self._show_session(event.session_id)
        if row is not None and self.selected in (ALL, row.session_id):
            self._show_row(row)

    # -- the sessions pane -----------------------------------------------------------------

    def _show_session(self, session_id: str) -> None:
        line = self.board.sessions.get(session_id)
        if line is None:
            return
        node = self.nodes.get(session_id)
        if node is None:
            tree = self.query_one("#sessions", Tree)
            parent = self.nodes.get(line.parent or "", tree.root)
            node = parent.add(Text(visible(line.label())), data=session_id, expand=True,
                              allow_expand=False)
            parent.allow_expand = True
            self.nodes[session_id] = node
        else:
            node.set_label(Text(visible(line.label())))
        if session_id == self.selected:
            self._say(f"{line.handle} ({line.agent}): {line.state.value}, "
                      f"{line.pending} pending")

    def on_tree_node_highlighted(self, message: Tree.NodeHighlighted[str]) -> None:
        if message.node.data is not None:
            self._select(message.node.data)

    def _select(self, session_id: str) -> None:
        if session_id == self.selected:
            return
        self.selected = session_id
        table = self.query_one("#transcript", DataTable)
        table.clear()
        for row in self._rows():
            self._show_row(row)
        if session_id == ALL:
            self._say(f"every session's rows, in feed order ({len(self.board.sessions)} "
                      "sessions)")
        self._show_session(session_id)

    # -- the transcript pane ---------------------------------------------------------------

    def _show_row(self, row: Row) -> None:
        table = self.query_one("#transcript", DataTable)
        if row.key in table.rows:
            table.update_cell(row.key, table.ordered_columns[2].key, self._cell(row))
        else:
            following = table.cursor_row >= table.row_count - 1  # on the last row: follow
            table.add_row(Text(row.who), str(row.seq), self._cell(row), key=row.key)
            if following:
                table.move_cursor(row=table.row_count - 1)

    def _cell(self, row: Row) -> Text:
        """The row's text, with every match of the search marked (rows that arrive or
        change later are marked too)."""
        text = styled_text(row)
        if self.query_text:
            text.highlight_words([self.query_text], MATCH, case_sensitive=False)
        return text

    def _rows(self) -> list[Row]:
        """The transcript pane's rows: the selected session's, or every session's."""
        return self.board.transcript.rows(self.selected or None)

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        self.query_text = message.value.strip()
        table = self.query_one("#transcript", DataTable)
        table.focus()
        for row in self._rows():  # mark the new query's matches, unmark the old one's
            if row.key in table.rows:
                table.update_cell(row.key, table.ordered_columns[2].key, self._cell(row))
        self.action_next_match(start=0)

    def action_next_match(self, start: int | None = None) -> None:
        if not self.query_text:
            return
        table = self.query_one("#transcript", DataTable)
        rows = self._rows()
        hits = [i for i, row in enumerate(rows) if self.query_text.lower() in row.text.lower()]
        if not hits:
            self._say(f"no row matches {self.query_text!r}")
            return
        after = table.cursor_row + 1 if start is None else start
        index = next((i for i in hits if i >= after), hits[0])
        table.move_cursor(row=index)
        self._say(f"match {hits.index(index) + 1} of {len(hits)} for {self.query_text!r}")

    # -- the approvals pane ----------------------------------------------------------------

    async def _refresh_approvals(self) -> None:
        self.held = await self.source.approvals()
        table = self.query_one("#approvals", DataTable)
        table.clear()
        for held in self.held:
            arguments = held.get("arguments") or {}
            sender = self.board.sessions.get(held["session_id"])
            # Text cells, escaped: a body is an agent's, and would otherwise be read as
            # markup and sent to the terminal with its control characters.
            cells = (sender.handle if sender else held["session_id"],
                     str(arguments.get("to", "?")), held["label"], str(arguments.get("body", "")))
            table.add_row(*(Text(visible(cell)) for cell in cells), key=held["approval_id"])

    async def action_answer(self, scope: str) -> None:
        await self._answer(True, scope)

    async def action_deny(self) -> None:
        await self._answer(False, "once")

    async def _answer(self, approve: bool, scope: str) -> None:
        table = self.query_one("#approvals", DataTable)
        if not self.held:
            self._tell("no send waits for approval")
            return
        held = self.held[min(table.cursor_row, len(self.held) - 1)]
        try:
            answered = await self.source.answer(held["approval_id"], approve, scope)
        except (RpcFailure, TreemailError, OSError) as exc:
            self._tell(f"not answered: {exc}", error=True)
            return
        self._tell(answer_line(answered))
        await self._refresh_approvals()

    def _say(self, text: str) -> None:
        # As text, escaped: it may quote a handle, a search or an answer's outcome.
        self.query_one("#status", Static).update(Text(visible(text)))

    def _tell(self, text: str, error: bool = False) -> None:
        """An answer's outcome: a notification, which the next event's status line would
        otherwise overwrite, and the status line too."""
        self.notify(visible(text), severity="error" if error else "information", markup=False)
        self._say(text)

    async def on_unmount(self) -> None:
        await self.source.close()


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


def main(args: argparse.Namespace) -> int:
    import sys

    from treemail.adapters.ui.commands import TokenMissing, target

    try:
        address, token = target(args) if args.connect else (None, None)
        source = choose(args.data_dir, address, token, args.store)
    except (TreemailError, TokenMissing) as exc:
        print(f"treemail tui: {exc}", file=sys.stderr)
        return 2
    TreemailTui(source).run()
    return 0
