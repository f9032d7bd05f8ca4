"""Helpers of the TUI tests: a daemon whose scripted model holds each run in flight for a
moment, and a recorder of its live feed that tests wait on by condition, never by sleeping.

A wait fails when what it waits on stops moving, not when a fixed time has passed: on a
loaded machine a TUI folds its events seconds apart (under a load of 20 on two cores it took
up to 37 s to fold the 60 events a daemon had sent it within 4 s), so a deadline on the whole
wait fails a test that was only slow. Each wait has a ``progress`` (the events folded
or recorded so far, and what the screen shows) and fails once it has not moved for ``stall``
seconds, saying what it waited for and where it stood; ``LIMIT`` bounds any wait as the last
resort."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from textual.app import App
from textual.pilot import Pilot

from tests.daemon.conftest import DaemonProcess
from tests.daemon.test_scenario import LEAD
from treemail.adapters.ui.tui.feed import LiveFeed
from treemail.core import events
from treemail.core.records import Event

__all__ = ["LEAD", "LIMIT", "STALL", "Recorder", "progress_of", "slow_daemon", "until",
           "wide_approval"]

# Seconds a wait goes on with nothing moving before it fails: a stall, not slowness (the
# longest gap between two folds measured under a load of 20 on two cores was under 4 s).
STALL = 30.0
# Seconds any wait may take in all, moving or not: the last resort, so that nothing hangs.
LIMIT = 600.0


def slow_daemon(data: Path, delay: float = 0.5) -> DaemonProcess:
    """A daemon over ``data`` whose every model turn takes ``delay`` seconds (so a client can
    steer a run in flight)."""
    (data / "config.toml").write_text(f"[daemon.scripted]\ndelay = {delay}\n")
    # From the agents directory, as an operator would install it (a doc given on the wire
    # is kept too: tests/daemon/test_registered.py).
    (data / "agents").mkdir(exist_ok=True)
    (data / "agents" / "lead.md").write_text(LEAD)
    return DaemonProcess(data)


class Recorder:
    """Everything a live subscription delivers, in order, as (feed number, Event)."""

    def __init__(self) -> None:
        self.got: list[tuple[int, Event]] = []
        self._grew = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def follow(self, feed: LiveFeed, after: int = 0) -> None:
        await self.stop()
        self._grew = asyncio.Event()  # this event loop's (a restart runs in a new one)
        await feed.start(after)
        self._task = asyncio.create_task(self._pump(feed))

    async def _pump(self, feed: LiveFeed) -> None:
        with contextlib.suppress(ConnectionError, TimeoutError):
            while True:
                self.got.append(await feed.next())
                self._grew.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def last(self) -> int:
        return self.got[-1][0] if self.got else 0

    async def until(self, seen: Callable[[events.Payload | events.UnknownEvent], bool],
                    after: Event | None = None, session_id: str | None = None,
                    what: str = "a recorded event", stall: float = STALL) -> Event:
        """The first recorded event (recorded after ``after``, of ``session_id``) whose
        payload ``seen`` accepts, waiting for it; it fails once nothing more was recorded for
        ``stall`` seconds (or after ``LIMIT``)."""
        def found() -> Event | None:
            events_after = [e for _, e in self.got]
            if after is not None:
                events_after = events_after[next(i for i, e in enumerate(events_after)
                                                 if e is after) + 1:]
            return next((e for e in events_after
                         if (session_id is None or e.session_id == session_id)
                         and seen(events.read(e))), None)

        async def grew() -> None:
            self._grew.clear()
            await self._grew.wait()

        await _waited(lambda: found() is not None, grew, what, stall, lambda: len(self.got))
        event = found()
        assert event is not None
        return event


def mail(kind: type[events.MessagePayload], message_id: str,
         ) -> Callable[[events.Payload | events.UnknownEvent], bool]:
    """A condition: message ``message_id`` entered the state ``kind`` records."""
    return lambda p: isinstance(p, kind) and p.message_id == message_id


def progress_of(app: App[Any]) -> Callable[[], object]:
    """What a TUI has done so far: the events it folded (live and history), the newest one's
    feed number, whether its history is read, the calls it lists as held and the screen it
    shows. A wait on the app fails only once none of these has moved for its ``stall``."""
    from treemail.adapters.ui.tui.app import TreemailTui

    if not isinstance(app, TreemailTui):
        return lambda: None
    return lambda: (app.board.folded, app.board.last, app.ready.is_set(), len(app.held),
                    type(app.screen).__name__)


async def until(check: Callable[[], bool], pause: Callable[[], Awaitable[None]],
                what: str, stall: float = STALL,
                progress: Callable[[], object] | None = None) -> None:
    """Wait for ``check`` to hold, letting the app run (``pause``) in between. It fails once
    ``progress`` has not changed for ``stall`` seconds (by default the progress of the app
    whose pilot's ``pause`` is given: ``progress_of``), or after ``LIMIT`` in all."""
    if progress is None:
        pilot = getattr(pause, "__self__", None)
        progress = progress_of(pilot.app) if isinstance(pilot, Pilot) else (lambda: None)
    await _waited(check, pause, what, stall, progress)


async def _waited(check: Callable[[], bool], pause: Callable[[], Awaitable[None]], what: str,
                  stall: float, progress: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    began = moved = loop.time()
    seen = progress()
    while not check():
        if (now := loop.time()) - moved > stall or now - began > LIMIT:
            why = (f"nothing moved for {now - moved:.1f}s" if now - moved > stall
                   else f"still moving after the last resort of {LIMIT:g}s")
            raise AssertionError(f"timed out waiting for {what}: {why}, {now - began:.1f}s "
                                 f"in all (progress: {seen!r})")
        try:
            async with asyncio.timeout(max(0.0, min(moved + stall, began + LIMIT) - now)):
                await pause()
        except TimeoutError:
            pass  # checked again, then failed above if nothing has moved
        if (now_seen := progress()) != seen:
            seen, moved = now_seen, loop.time()


async def wide_approval(app: App[Any], pilot: Any, key: str) -> str:
    """Press ``key`` (``s`` or ``t``) on the approvals pane, and say yes to the question it
    asks first; the question, as asked."""
    from textual.widgets import Static

    from treemail.adapters.ui.tui.screens import Confirm

    await pilot.press(key)
    await until(lambda: isinstance(app.screen, Confirm), pilot.pause, "the question asked")
    question = str(app.screen.query_one("#question", Static).render())
    await pilot.press("y")
    await until(lambda: not isinstance(app.screen, Confirm), pilot.pause, "the question gone")
    return question


def svg_lines(svg: str) -> list[str]:
    """The text of a screenshot Textual exported as SVG, line by line: each ``<text>`` put at
    its cell (its ``x`` over the cell width) on its line (the ``line-N`` it is clipped to),
    trailing blanks dropped. Compared by content, not byte for byte: a Textual release that
    draws the same screen with other SVG markup still passes."""
    import re
    import xml.etree.ElementTree as ET

    spans: dict[int, list[tuple[int, str]]] = {}
    width = 0.0
    for node in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text"):
        line = re.search(r"line-(\d+)\)", node.get("clip-path", ""))
        text = (node.text or "").replace("\xa0", " ")
        if line is None or not text:
            continue  # the window's title, outside the terminal's lines
        if not width:
            width = float(node.get("textLength", "0")) / len(text)
        spans.setdefault(int(line[1]), []).append((round(float(node.get("x", "0")) / width),
                                                   text))
    lines = []
    for number in range(max(spans, default=-1) + 1):
        cells: list[str] = []
        for column, text in sorted(spans.get(number, [])):
            cells.extend(" " for _ in range(column - len(cells)))
            cells[column:column + len(text)] = list(text)
        lines.append("".join(cells).rstrip())
    return lines


def assert_snapshot(text: str, path: Path) -> None:
    """``text`` equals the snapshot at ``path``; TREEMAIL_SNAPSHOTS=update rewrites it (then
    read the diff before committing it)."""
    import difflib
    import os

    if os.environ.get("TREEMAIL_SNAPSHOTS") == "update" or not path.exists():
        path.write_text(text + "\n", encoding="utf-8")
        if os.environ.get("TREEMAIL_SNAPSHOTS") != "update":
            raise AssertionError(f"no snapshot at {path}; wrote one, review it and re-run")
    expected = path.read_text(encoding="utf-8").rstrip("\n")
    if text != expected:
        diff = "\n".join(difflib.unified_diff(expected.split("\n"), text.split("\n"),
                                              "snapshot", "now", lineterm=""))
        raise AssertionError(f"{path.name} differs:\n{diff}")


@contextlib.contextmanager
def reaped(process: DaemonProcess) -> Iterator[DaemonProcess]:
    """``process``, SIGKILLed on the way out if a failed test left it running (a stopped or
    killed one is left as it is)."""
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(timeout=20)
