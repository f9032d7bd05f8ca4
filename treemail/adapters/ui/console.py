"""The CLI's output: rich tables, coloured rows and progress on a terminal, plain otherwise.

Whether a stream is a terminal decides everything, and nothing else does: written to a pipe
or a file, tables are aligned plain columns, rows are exactly ``Row.line()`` and progress
prints only its final line, so scripts (and tests) read a stable form. ``NO_COLOR`` is
honoured by rich on a terminal.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from treemail.adapters.ui.styles import styled_line
from treemail.adapters.ui.terminal import visible
from treemail.adapters.ui.transcript import Row

__all__ = ["ProgressLine", "Ticker", "advance", "console", "controlling_terminal",
           "print_row", "print_table", "row_console", "steps"]


def console(stream: TextIO | None = None) -> Console:
    """A rich console on ``stream`` (stdout by default); ``is_terminal`` says which form."""
    return Console(file=stream or sys.stdout, soft_wrap=True, highlight=False)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                stream: TextIO | None = None, title: str | None = None) -> None:
    """A table: rich on a terminal; plain, two-space aligned columns otherwise. Cells may hold
    outside text (agent names, reasons): their control characters are shown escaped."""
    out = console(stream)
    headers = [visible(h) for h in headers]
    rows = [[visible(cell) for cell in row] for row in rows]
    if out.is_terminal:
        # Each column as wide as its cells, even past the terminal: ids are copied from it.
        cells = [list(headers), *[list(row) for row in rows]]
        widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
        table = Table(title=title, header_style="bold", box=None, pad_edge=False)
        for header, width in zip(headers, widths, strict=True):
            table.add_column(header, no_wrap=True, min_width=width)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # as text: no markup in a cell
        out.print(table, width=max(out.width, sum(widths) + 2 * len(widths)), crop=False)
        return
    every = [list(headers), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in every) for i in range(len(headers))]
    for row in every:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(),
              file=out.file, flush=True)


def print_row(row: Row, out: Console) -> None:
    """A transcript row: coloured by what it is about on a terminal, else ``Row.line()``."""
    if out.is_terminal:
        out.print(styled_line(row))  # soft-wrapped: the terminal folds a long row, nothing cut
    else:
        print(row.line(), file=out.file, flush=True)


class ProgressLine(io.StringIO):
    """A stream for code that redraws one progress line with ``\\r`` (the model checker): on a
    terminal the line is shown live by rich; otherwise only finished lines pass (no ``\\r``
    noise in a log). A ``StringIO`` only so it types as the ``TextIO`` such code takes;
    nothing is buffered in it."""

    def __init__(self, stream: TextIO, label: str) -> None:
        super().__init__()
        self.out = Console(file=stream, highlight=False)
        self.label = label
        self._live: Live | None = None
        self._started = time.monotonic()

    def write(self, text: str) -> int:
        line = text.replace("\r", "")
        if self.out.is_terminal:
            self._draw(line)
        elif line.endswith("\n"):
            print(line.rstrip("\n"), file=self.out.file)
        return len(text)

    def _draw(self, line: str) -> None:
        shown = Text(f"{self.label} ", style="bold cyan")
        shown.append(line.strip())
        shown.append(f"  {time.monotonic() - self._started:.1f}s", style="dim")
        if self._live is None:
            self._live = Live(shown, console=self.out, refresh_per_second=5, transient=False)
            self._live.start()
        else:
            self._live.update(shown)
        if line.endswith("\n"):
            self._live.stop()
            self._live = None

    def flush(self) -> None:
        self.out.file.flush()


@contextmanager
def steps(total: int, label: str, stream: TextIO | None = None) -> Iterator[Progress | None]:
    """A progress bar over ``total`` steps on a terminal (``advance`` it); None elsewhere,
    where the caller's own lines are the record."""
    out = Console(file=stream or sys.stderr)
    if not out.is_terminal:
        yield None
        return
    # Lines printed to a terminal's stdout pass through the bar, above it; to a file or a
    # pipe they go straight there, untouched by it.
    bar = Progress(TextColumn("[bold cyan]{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TextColumn("{task.fields[step]}"),
                   TimeElapsedColumn(), console=out, transient=True,
                   redirect_stdout=console().is_terminal)
    with bar:
        bar.add_task(label, total=total, step="")
        yield bar


def advance(bar: Progress | None, step: str) -> None:
    """One step of a ``steps`` bar, shown as ``step``; nothing off a terminal (no bar)."""
    if bar is not None:
        bar.update(bar.task_ids[0], advance=1, step=step)


def row_console(bar: Progress | None) -> Console:
    """Where a command that shows ``bar`` prints its rows: on the bar's console when stdout
    is a terminal too, so they scroll above the bar (a console of its own would write
    through the bar's line: rich unwraps the redirected stdout); else stdout's."""
    out = console()
    return bar.console if bar is not None and out.is_terminal else out


def controlling_terminal() -> TextIO | None:
    """The process's terminal even when its output is captured (a long test campaign under
    pytest), or None without one (CI, cron): progress for a person watching, never in logs."""
    try:
        return open("/dev/tty", "w", encoding="utf-8")
    except OSError:
        return None


class Ticker:
    """A bar over ``total`` steps for a loop that calls it once per step, then ``close``;
    it draws only on a terminal (``stream``, by default the controlling terminal)."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else controlling_terminal()
        self.bar: Progress | None = None
        if self.stream is not None and Console(file=self.stream).is_terminal:
            self.bar = Progress(TextColumn("[bold cyan]{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TextColumn("{task.fields[step]}"),
                                TimeElapsedColumn(), console=Console(file=self.stream),
                                transient=True, redirect_stdout=False, redirect_stderr=False)
            self.bar.add_task(label, total=total, step="")
            self.bar.start()

    def __call__(self, step: str = "") -> None:
        if self.bar is not None:
            self.bar.update(self.bar.task_ids[0], advance=1, step=step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.stream is not None and self.stream not in (sys.stdout, sys.stderr):
            self.stream.close()
