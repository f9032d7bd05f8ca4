"""``treemail tui``: watch a tree of agents converse, and answer their approvals.

Three panes: the sessions of the tree (by parent links: state, pending mail, handle, agent,
a dot where the session's actor is in memory, and whether it is a ghost of a reverted
branch), the transcript of the selected session (one row per message, its lifecycle state
updated in place, model output and tool calls in log order; enter reads a row whole), and the
``ask`` sends held for the user, answered from that pane only (a wide scope asks first, a
deny takes a reason). It opens on a snapshot of the sessions as they are, follows the feed
live from there, and reads the history behind it in pages, newest first. Every row is folded
by ``Board``, the same rows ``treemail tail`` and ``treemail replay`` print; nothing is
polled. On a store with no daemon it is a read-only replay.
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
from treemail.adapters.ui.feed import answer_line
from treemail.adapters.ui.styles import styled_text
from treemail.adapters.ui.terminal import visible
from treemail.adapters.ui.transcript import Row
from treemail.adapters.ui.tui.approvals import Approvals, question
from treemail.adapters.ui.tui.board import Board, SessionLine
from treemail.adapters.ui.tui.detail import detail
from treemail.adapters.ui.tui.screens import Confirm, Deny, Detail, Help
from treemail.adapters.ui.tui.screenshot import pane_text, screen_text
from treemail.adapters.ui.tui.sources import Snapshot, Source, choose
from treemail.core.errors import TreemailError
from treemail.core.lifecycle import SessionState
from treemail.core.records import Event

__all__ = ["ALL", "MATCH", "Approvals", "TreemailTui", "main", "pane_text", "screen_text"]

ALL = ""  # the tree's root: the transcript pane shows every session's rows
MATCH = "bold black on yellow"  # a search match within a transcript row

# The transcript pane holds at most this many rows at once, around where the user is (the
# newest, or a search's match): a table measures every cell it holds, so a pane of a long
# history's every row would cost seconds to fill. Search reaches every row all the same.
WINDOW = 1000

# How often the lit actor dots are checked against the daemon. An eviction is no event of
# the log (the log records mail and runs, not the daemon's memory), so no event puts a dot
# out: the daemon is asked, for the lit ones only.
RESIDENCY_POLL = 2.0


class TreemailTui(App[None]):
    TITLE = "treemail"
    # The tree has the focus at first, never the approvals pane: a key typed before the
    # user moved there answers nothing.
    AUTO_FOCUS = "#sessions"
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
        Binding("slash", "search", "Search"),
        Binding("n", "next_match", "Next match"),
        Binding("N", "next_match(-1)", "Previous match"),
        Binding("w", "wrap", "Wrap rows"),
        Binding("question_mark", "help", "Keys"),
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
        self.wrap = False  # the transcript's rows wrapped to the pane's width (``w``)
        self.first = 0  # the index, among the selection's rows, of the pane's first row
        self.at_end = True  # the pane holds the newest row: a new one is added below it
        self.note = ""  # the status line's message, after its counts
        self.head = 0  # the snapshot's feed number: the history ends there
        self.opened = asyncio.Event()  # the current tree and the newest page are shown
        self.ready = asyncio.Event()  # the whole history is shown (tests wait on it)
        self.batches = 0  # how many batches of live events were folded and shown
        self.sub_title = ("replay (read-only): " if source.read_only else "live: ") + source.where

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield Tree[str]("all sessions", ALL, id="sessions")
            with Vertical(id="right"):
                yield DataTable(id="transcript", cursor_type="row")
                yield Static("", id="status")
                yield Input(placeholder="/ search the transcript", id="search")
        yield Approvals(id="approvals", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        sessions = self.query_one("#sessions", Tree)
        sessions.root.expand()
        sessions.border_title = "sessions"
        transcript = self.query_one("#transcript", DataTable)
        transcript.add_columns("session", "#", "row")
        transcript.fixed_columns = 2  # who and where stay in view while a long row scrolls
        transcript.border_title = "transcript"
        approvals = self.query_one("#approvals", DataTable)
        approvals.add_columns("sender", "recipient", "label", "body")
        approvals.border_title = "approvals: held ask sends (focus here to answer)"
        self._say("opening…")
        self.run_worker(self._follow(), name="follow", exit_on_error=False)

    # -- the feed ------------------------------------------------------------------------

    async def _follow(self) -> None:
        try:
            await self.source.open()
            snapshot = await self.source.snapshot()
            self._start(snapshot)
            self.run_worker(self._history(), name="history", exit_on_error=False)
            if not self.source.read_only:
                self.run_worker(self._residency(), name="residency", exit_on_error=False)
            async for batch in self.source.batches():
                if self._fold(batch):
                    await self._refresh_approvals()
        except (OSError, RpcFailure, TreemailError) as exc:  # ConnectionError is an OSError
            self._say(f"not following {self.source.where}: {exc}")
            self.sub_title = f"stopped: {self.source.where}"
            self.opened.set()
            self.ready.set()

    def _start(self, snapshot: Snapshot) -> None:
        """The tree as it is now, before any history: no state shown is an old one."""
        self.head = snapshot.head
        waiting: dict[str, set[str]] = {}
        for held in snapshot.approvals:
            waiting.setdefault(held["session_id"], set()).add(held["approval_id"])
        self.board.start((SessionLine(
            s["session_id"], s["parent_session_id"], s["handle"] or s["session_id"],
            s["agent"], SessionState(s["state"]), live=s["live"],
            waiting=waiting.get(s["session_id"], set()), resident=bool(s.get("resident")))
            for s in snapshot.sessions), snapshot.head)
        for line in self.board.sessions.values():
            self._show_session(line.session_id)
        self._show_approvals(snapshot.approvals)
        self._say("pick a session in the tree, / to search, ? for the keys")

    async def _history(self) -> None:
        """The history up to the snapshot, newest page first: the newest rows show at once,
        the rest fill in behind them while the status line counts them."""
        try:
            async for page in self.source.history(self.head):
                for row in self.board.older(page):
                    self._update_row(row)
                if not self.opened.is_set():
                    self._refill()
                    self.opened.set()
                self._status()
                # A replay's pages are at hand without waiting: let keys and drawing run
                # between them, so the screen stays the user's while the rest folds in.
                await asyncio.sleep(0)
        except (OSError, RpcFailure, TreemailError) as exc:
            self._say(f"history not read from {self.source.where}: {exc}")
        self.board.finish()
        table = self.query_one("#transcript", DataTable)
        if self.at_end and table.cursor_row >= table.row_count - 1:  # left where it was
            self._refill()  # else the user has moved (a search): the pane stays there
        for session_id in self.board.sessions:
            self._show_session(session_id)
        self.opened.set()
        self.ready.set()
        self._status()

    def _fold(self, batch: list[tuple[int, Event]]) -> bool:
        """Fold a batch of live events, then show what they changed, once: the screen is
        drawn once a batch, not once an event (which kept a loaded TUI behind its feed), and
        ends as showing them one by one would. Whether an approval was asked or answered."""
        changed = self.board.live(batch)
        with self.batch_update():
            for session_id in changed.sessions:
                self._show_session(session_id)
            for row in changed.rows:
                if self.selected in (ALL, row.session_id):
                    self._show_row(row)
            self._status()
        self.batches += 1
        return changed.approvals

    async def _residency(self) -> None:
        """Put out the dots of actors the daemon evicted. An answer that crossed a spawn
        (an event lit the dot while the daemon was being asked) is not taken."""
        while True:
            await asyncio.sleep(RESIDENCY_POLL)
            lit = [sid for sid, line in self.board.sessions.items() if line.resident]
            if not lit:
                continue
            before = {sid: self.board.spawns.get(sid, 0) for sid in lit}
            try:
                now = await self.source.resident(lit)
            except (OSError, RpcFailure, TreemailError):
                return  # the daemon is gone: the follow says so
            for sid, resident in now.items():
                line = self.board.sessions.get(sid)
                if (line is not None and not resident and line.resident
                        and self.board.spawns.get(sid, 0) == before[sid]):
                    line.resident = False
                    self._show_session(sid)

    # -- the status line -----------------------------------------------------------------

    def _status(self) -> None:
        """The counts, always as they are now, then the last thing said."""
        board = self.board
        shown = "replayed" if self.source.read_only else "live"
        counts = (f"{len(board.sessions)} sessions, {board.waiting()} waiting on you, "
                  f"{board.folded:,} events {shown}")
        if not board.complete:
            counts += f" (history {board.folded:,} of {self.head:,}…)"
        text = f"{counts} · {self.note}" if self.note else counts
        # As text, escaped: it may quote a handle, a search or an answer's outcome.
        self.query_one("#status", Static).update(Text(visible(text)))

    def _say(self, text: str) -> None:
        self.note = text
        self._status()

    def _tell(self, text: str, error: bool = False) -> None:
        """An answer's outcome: a notification, which the next event's status line would
        otherwise overwrite, and the status line too."""
        self.notify(visible(text), severity="error" if error else "information", markup=False)
        self._say(text)

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

    def on_tree_node_highlighted(self, message: Tree.NodeHighlighted[str]) -> None:
        # A highlight still queued when the app quits is handled after its panes are gone
        # (the tree is no longer attached): refilling the transcript then crashed the exit.
        if message.node.data is not None and message.control.is_attached:
            self._select(message.node.data)

    def _select(self, session_id: str) -> None:
        if session_id == self.selected:
            return
        self.selected = session_id
        self._refill()
        line = self.board.sessions.get(session_id)
        if line is None:
            self._say(f"every session's rows, in feed order ({len(self.board.sessions)} "
                      "sessions)")
        else:
            pending = "…" if line.pending is None else line.pending
            self._say(f"{line.handle} ({line.agent}): {line.shown_state()}, {pending} pending")

    # -- the transcript pane ---------------------------------------------------------------

    def _refill(self, around: int | None = None) -> None:
        """The transcript pane anew, from the rows folded so far: the newest ``WINDOW`` of
        them, or those ``around`` one (an index among them), the cursor on it."""
        table = self.query_one("#transcript", DataTable)
        table.clear()
        rows = self._rows()
        last = len(rows) - 1 if around is None else around
        self.first = max(0, min(last - WINDOW // 2, len(rows) - WINDOW)) if around is not None \
            else max(0, len(rows) - WINDOW)
        text = table.ordered_columns[2]
        text.auto_width = not self.wrap
        if self.wrap:  # the row's text gets what the pane leaves it, and wraps in it
            used = sum(c.get_render_width(table) for c in table.ordered_columns[:2])
            text.width = max(20, table.scrollable_content_region.width - used
                             - 2 * table.cell_padding)
        for row in rows[self.first:self.first + WINDOW]:
            self._add(table, row)
        shown = "" if self.first == 0 and len(rows) <= WINDOW else (
            f"(rows {self.first + 1:,} to {self.first + table.row_count:,} of {len(rows):,})")
        table.border_subtitle = shown
        self.at_end = self.first + table.row_count >= len(rows)
        # On the newest row the pane follows what arrives.
        table.move_cursor(row=last - self.first, scroll=True)

    def _add(self, table: DataTable[Any], row: Row) -> None:
        # A wrapped row is as high as its text needs; an unwrapped one is one line, and a
        # long one scrolls sideways (each row's height is measured only when wrapping, so
        # a long history costs no rendering as it loads).
        table.add_row(Text(row.who), str(row.seq), self._cell(row), key=row.key,
                      height=None if self.wrap else 1)

    def action_wrap(self) -> None:
        self.wrap = not self.wrap
        self._refill()
        self._say("rows wrapped to the pane" if self.wrap else "one line a row")

    def on_resize(self) -> None:
        if self.wrap:  # the width the rows wrap at has changed
            self.call_after_refresh(self._refill)

    def _show_row(self, row: Row) -> None:
        table = self.query_one("#transcript", DataTable)
        if row.key in table.rows:
            self._update_row(row)
        elif self.at_end:  # else it is below the rows shown, reached by moving there
            following = table.cursor_row >= table.row_count - 1  # on the last row: follow
            self._add(table, row)
            if following:
                table.move_cursor(row=table.row_count - 1)

    def _update_row(self, row: Row) -> None:
        table = self.query_one("#transcript", DataTable)
        if row.key in table.rows:
            table.update_cell(row.key, table.ordered_columns[2].key, self._cell(row))

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

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        """Enter on a transcript row: the row read whole, in a dialog."""
        if message.data_table.id != "transcript" or message.row_key.value is None:
            return
        row = self.board.transcript.row(message.row_key.value)
        if row is not None:
            heading, body = detail(row, self.board.sources.get(row.key, []),
                                   self.board.transcript.name)
            self.push_screen(Detail(heading, body))

    def action_help(self) -> None:
        self.push_screen(Help())

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        if not message.control.is_attached:  # queued as the app quit: no pane to search
            return
        self.query_text = message.value.strip()
        table = self.query_one("#transcript", DataTable)
        table.focus()
        for key in list(table.rows):  # mark the new query's matches, unmark the old one's
            row = self.board.transcript.row(str(key.value))
            if row is not None:
                self._update_row(row)
        self._match(start=0)

    def action_next_match(self, step: int = 1) -> None:
        self._match(step=step)

    def _match(self, step: int = 1, start: int | None = None) -> None:
        """Move to the next match (``step`` -1: the previous one), or the first from
        ``start``, and bring it into view."""
        if not self.query_text:
            self._say("no search yet: / to search")
            return
        table = self.query_one("#transcript", DataTable)
        rows = self._rows()
        hits = [i for i, row in enumerate(rows) if self.query_text.lower() in row.text.lower()]
        if not hits:
            self._say(f"no row matches {self.query_text!r}")
            return
        here = self.first + table.cursor_row  # the cursor's index among every row
        if start is not None:
            index = next((i for i in hits if i >= start), hits[0])
        elif step > 0:
            index = next((i for i in hits if i > here), hits[0])
        else:
            index = next((i for i in reversed(hits) if i < here), hits[-1])
        if self.first <= index < self.first + table.row_count:
            table.move_cursor(row=index - self.first, scroll=True)
        else:  # beyond the rows the pane holds: the pane moves to it
            self._refill(around=index)
        if not self.wrap:  # and sideways to the match, in a row longer than the pane
            where = rows[index].text.lower().index(self.query_text.lower())
            left = sum(c.get_render_width(table) for c in table.ordered_columns[:2])
            x = table.cell_padding + where - (table.scrollable_content_region.width - left) // 3
            self.call_after_refresh(table.scroll_to, x=max(0, x), animate=False)
        self._say(f"match {hits.index(index) + 1} of {len(hits)} for {self.query_text!r}")

    # -- the approvals pane ----------------------------------------------------------------

    async def _refresh_approvals(self) -> None:
        self._show_approvals(await self.source.approvals())

    def _show_approvals(self, held: list[dict[str, Any]]) -> None:
        self.held = held
        table = self.query_one("#approvals", DataTable)
        table.clear()
        for one in self.held:
            arguments = one.get("arguments") or {}
            # Text cells, escaped: a body is an agent's, and would otherwise be read as
            # markup and sent to the terminal with its control characters.
            cells = (self._handle(one["session_id"]), str(arguments.get("to", "?")),
                     one["label"], str(arguments.get("body", "")))
            table.add_row(*(Text(visible(cell)) for cell in cells), key=one["approval_id"])

    def _handle(self, session_id: str) -> str:
        line = self.board.sessions.get(session_id)
        return line.handle if line is not None else session_id

    def _current(self) -> dict[str, Any] | None:
        """The held call under the approvals pane's cursor."""
        if not self.held:
            self._tell("no send waits for approval")
            return None
        table = self.query_one("#approvals", DataTable)
        return self.held[min(table.cursor_row, len(self.held) - 1)]

    async def action_answer(self, scope: str) -> None:
        held = self._current()
        if held is None:
            return
        if scope == "once":
            await self._answer(held, True, scope)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._answer(held, True, scope), exit_on_error=False)
            else:
                self._say("not approved: nothing was answered")

        self.push_screen(Confirm(question(held, self._handle(held["session_id"]), scope)), answered)

    async def action_deny(self) -> None:
        held = self._current()
        if held is None:
            return

        def denied(reason: str | None) -> None:
            if reason is None:
                self._say("not denied: nothing was answered")
            else:
                self.run_worker(self._answer(held, False, "once", reason or None),
                                exit_on_error=False)

        arguments = held.get("arguments") or {}
        self.push_screen(Deny(visible(f"{held['tool']} from {self._handle(held['session_id'])}"
                                      f" to {arguments.get('to', '?')}")), denied)

    async def _answer(self, held: dict[str, Any], approve: bool, scope: str,
                      reason: str | None = None) -> None:
        try:
            answered = await self.source.answer(held["approval_id"], approve, scope, reason)
        except (RpcFailure, TreemailError, OSError) as exc:
            self._tell(f"not answered: {exc}", error=True)
            return
        self._tell(answer_line(answered))
        await self._refresh_approvals()

    async def on_unmount(self) -> None:
        await self.source.close()


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
