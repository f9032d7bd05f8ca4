"""The demo: scripted agents on the asyncio ``Runtime``, over the embedded LMDB store (or the
store ``treemail demo --store URL`` names).

A lead delegates explore and tester; review waits queued. The lead steers running explore and
messages review, which claims that mail when its run starts. Siblings talk, and review's send
to its sibling waits for the user's approval. tester finishes, and the lead's mail wakes it.
Then the process "dies" with mail claimed and pending; a new ``Runtime`` recovers the store,
and every accepted message is delivered exactly once, which the demo checks and prints.

The transcript is the durable event feed, printed live by an observer plugin (the rows
``treemail log`` replays), with what each model read and did. Every model waits at a gate
(``demo_agents.Stage``) until the demo releases it, and the demo releases one only once the
others are parked or idle, so the output is the same on every run.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from rich.console import Console

from treemail.adapters.runtime.demo_agents import REVIEW, Stage, demo_agents
from treemail.adapters.runtime.ids import SeededIds
from treemail.adapters.runtime.runtime import Runtime
from treemail.adapters.store.factory import open_store
from treemail.adapters.ui.console import console, print_row
from treemail.adapters.ui.transcript import brief_result as _brief
from treemail.adapters.ui.transcript import event_row
from treemail.core import events
from treemail.core.engine import Engine
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.records import Event, Owner, Session

__all__ = ["Transcript", "main", "run_demo"]

_PAD = " " * 30  # details line up under the rows' text


class Transcript:
    """An observer plugin: every feed event as a log row, then what it means for the agents
    (what a model read and did, tool results, approvals)."""

    def __init__(self, out: TextIO, rows: Console | None = None) -> None:
        self.out = out
        # Coloured rows on a terminal, the plain lines elsewhere.
        self.console = rows if rows is not None else console(out)
        self.last = 0  # the last feed number shown
        self._names: dict[str, str] = {}
        self._tools: dict[str, str] = {}  # tool call id -> tool name

    def name(self, session_id: str | None) -> str:
        return self._names.get(session_id or "", session_id or "?")

    def on_event(self, number: int, event: Event) -> None:
        payload = events.read(event)
        if isinstance(payload, events.SessionCreated):
            self._names[event.session_id] = payload.handle or event.session_id
        print_row(event_row(event, self.name, payload), self.console)
        for line in self._details(payload):
            print(_PAD + line, file=self.out)
        self.last = number

    def _details(self, payload: events.Payload | events.UnknownEvent) -> Iterator[str]:
        if isinstance(payload, events.ModelOutput):
            yield from self._output(payload)
        elif isinstance(payload, events.ToolResults):
            for result in payload.results:
                tool = self._tools.get(result.tool_call_id, "?")
                yield f"-> {tool}: {_brief(result.content)}"
        elif isinstance(payload, events.ApprovalRequested):
            yield (f"held: {payload.tool} ({payload.tool_call_id}) to a "
                   f"{payload.label} peer, under an ask rule; the run waits for the user")
        elif isinstance(payload, events.ApprovalAnswered):
            yield f"the user: {payload.state.value}, scope {payload.scope}"
            yield f"-> send_message: {_brief(payload.outcome.text())}"
        elif isinstance(payload, events.DelegationCompleted):
            yield f"the delegation's result goes to the parent (message {payload.message_id[:8]})"

    def _output(self, output: events.ModelOutput) -> Iterator[str]:
        for entry in output.inputs:
            lines = entry.splitlines() or [""]
            yield f"reads | {lines[0]}"
            yield from (f"      | {line}".rstrip() for line in lines[1:])
        if output.text:
            yield f'says  "{output.text}"'
        for call in output.tool_calls:
            self._tools[call.id] = call.name
            arguments = json.loads(call.arguments)
            body = arguments.pop("body", None) or arguments.pop("task", None)
            shown = ", ".join(f"{key}={value}" for key, value in arguments.items())
            yield f'calls {call.name}({shown}): "{body}"'


class Demo:
    def __init__(self, url: str, out: TextIO, rows: Console | None = None) -> None:
        self.url = url
        self.out = out
        self.ids = SeededIds(7)
        self.stage = Stage()
        self.agents = demo_agents(self.stage)
        self.transcript = Transcript(out, rows)
        self.scene: Callable[[str], None] = lambda heading: None  # progress, on a terminal
        self.store = open_store(url)
        self.rt = self._runtime()

    def _runtime(self) -> Runtime:
        return Runtime(self.store, self.ids, self.agents, plugins=[self.transcript],
                       feed_interval=0.01)

    @property
    def engine(self) -> Engine:
        return self.rt.engine

    # -- narration -----------------------------------------------------------------------

    def say(self, heading: str) -> None:
        print(f"\n== {heading}", file=self.out)
        self.scene(heading)

    def note(self, text: str) -> None:
        print(f"    {text}", file=self.out)

    # -- direction -----------------------------------------------------------------------

    async def go(self, *names: str) -> None:
        """Let each agent's model reply in turn, waiting for the tree to settle after each."""
        for name in names:
            self.stage.release(name)
            await self.settle()

    async def settle(self, timeout: float = 20.0) -> None:
        """Wait until no actor can write (every model parked at its gate or waiting for an
        approval, every other session idle, finished, or queued with no actor), then until
        the transcript has shown the whole feed. Only then may the demo act again."""
        rt = self.rt
        try:
            async with asyncio.timeout(timeout):
                while not await self._settled():
                    await asyncio.sleep(0.005)
                while await rt.writer.quiet(self.engine.feed, self.transcript.last):
                    await asyncio.sleep(0.005)
        except TimeoutError:
            states = [f"{s.reference} ({s.state})" for s in self.engine.sessions()]
            raise RuntimeError(f"the demo did not settle in {timeout}s: {', '.join(states)}; "
                               f"actor errors: {rt.crashes}") from None

    async def _settled(self) -> bool:
        rt = self.rt
        if rt.crashes:
            raise rt.crashes[0]
        sessions: list[Session] = await rt.writer.quiet(self.engine.sessions)
        asking = {a.session_id for a in await rt.writer.quiet(self.engine.approvals)}
        for session in sessions:
            if session.state is SessionState.RUNNING:
                if not (self.stage.waiting(session.agent.name) or session.session_id in asking):
                    return False
            elif session.state is SessionState.QUEUED and rt.resident(session.session_id):
                return False
        return True

    async def roster(self) -> None:
        """Tell the brains every session's handle (scripts name peers by agent)."""
        sessions: list[Session] = await self.rt.writer.quiet(self.engine.sessions)
        self.stage.roster.update({s.agent.name: s.reference for s in sessions})

    # -- scenes --------------------------------------------------------------------------

    async def delegation(self) -> None:
        self.say("A user asks the lead; it delegates explore and tester, review waits queued")
        await self.rt.start()
        lead = await self.rt.create_root("lead")
        await self.rt.accept(lead.session_id, "Ship the parser fix, reviewed and tested.",
                             Owner.USER)
        await self.settle()
        await self.go("lead")
        self.note("the demo delegates review for the lead and holds its start, as a scheduler")
        self.note("at capacity would: review stays queued until mail pokes it")
        await self.rt.writer(self.engine.delegate, lead.session_id, REVIEW,
                             "Review the parser fix.")
        await self.roster()
        await self.settle()

    async def steering(self) -> None:
        self.say("The lead steers explore (running) and messages review (queued)")
        self.note("explore's model is still on its first request: the steer joins its next one;")
        self.note("review claims the lead's mail with its task when its run starts")
        await self.go("lead", "explore")

    async def siblings(self) -> None:
        self.say("Siblings: explore tells review; review's answer to explore asks the user")
        await self.go("explore", "review")
        [held] = await self.rt.pending_approvals()
        self.note(f"the user answers review's held call {held.tool_call_id}: approve, scope once")
        await self.rt.answer(held.approval_id, approve=True, scope="once")
        await self.settle()

    async def waking(self) -> None:
        self.say("A finished child wakes: tester finishes, the lead's mail wakes it")
        self.note("the lead's run ends, and mail that missed it starts its next run")
        await self.go("tester", "lead", "lead")
        self.note("tester reads the lead's mail as input, answers by mail, and its delegation")
        self.note("is not reported again")
        await self.go("tester", "tester")

    async def crash(self) -> None:
        self.say("Crash: the process dies with mail claimed and mail pending")
        for session in self.engine.sessions():
            for message in self.engine.pending(session.session_id):
                where = ("claimed by an open model request" if message.state is MessageState.CLAIMED
                         else f"{message.state}, not yet claimed")
                self.note(f"{session.reference}: message {message.message_id[:8]} {where}")
        await self.rt.abandon()
        self.store.close()
        self.note("runtime abandoned (nothing more written), store closed")

    async def recovery(self) -> None:
        self.say("Restart: a new Runtime reopens the store; recovery delivers the mail once")
        self.store = open_store(self.url)
        self.rt = self._runtime()
        dead = await self.rt.start()
        await self.settle()
        self.note(f"recovery found {dead} dead run(s); each session with mail runs again")
        await self.go("explore", "review", "lead", "lead")
        await self.rt.shutdown()


async def _play(demo: Demo) -> bool:
    try:
        await demo.delegation()
        await demo.steering()
        await demo.siblings()
        await demo.waking()
        await demo.crash()
        await demo.recovery()
        return _verify(demo)
    except BaseException:
        await demo.rt.abandon()  # a failed demo leaves no actor behind
        raise
    finally:
        demo.store.close()


def _verify(demo: Demo) -> bool:
    """Every accepted message consumed exactly once, nothing pending, nothing lost."""
    accepted: set[str] = set()
    consumed: Counter[str] = Counter()
    for _, event in demo.engine.feed():
        payload = events.read(event)
        if isinstance(payload, events.ProducerMessageAccepted):
            accepted.add(payload.message_id)
        elif isinstance(payload, events.ProducerMessageConsumed):
            consumed[payload.message_id] += 1
    pending = sum(len(demo.engine.pending(s.session_id)) for s in demo.engine.sessions())
    exact = set(consumed) == accepted and all(n == 1 for n in consumed.values())
    demo.say("Check")
    print(f"    {len(accepted)} messages accepted, {sum(consumed.values())} consumed, "
          f"{pending} pending: {'each exactly once' if exact and not pending else 'MISMATCH'}",
          file=demo.out)
    return exact and pending == 0


SCENES = 7  # the headings the demo says, Check included


def run_demo(url: str, out: TextIO, scene: Callable[[str], None] | None = None,
             rows: Console | None = None) -> bool:
    """The demo, its narration on ``out`` and its rows on ``rows`` (by default a console on
    ``out``)."""
    async def play() -> bool:
        demo = Demo(url, out, rows)
        if scene is not None:
            demo.scene = scene
        return await _play(demo)

    return asyncio.run(play())


def _shown(url: str) -> bool:
    """The demo, with a bar over its scenes on a terminal's stderr (the transcript, on stdout,
    is the same either way)."""
    from treemail.adapters.ui.console import advance, row_console, steps

    with steps(SCENES, "demo") as bar:
        # Inside: a bar on the terminal redirects sys.stdout.
        return run_demo(url, sys.stdout, lambda heading: advance(bar, heading[:40]),
                        row_console(bar))


def main(url: str | None = None) -> int:
    """The demo on the store ``url`` names (a new or empty one), by default in a temp dir."""
    if url is not None:
        return 0 if _shown(url) else 1
    with tempfile.TemporaryDirectory(prefix="treemail-demo-") as tmp:
        return 0 if _shown(f"lmdb:{Path(tmp) / 'store'}") else 1
