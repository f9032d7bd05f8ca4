"""The demo: a delegation tree exchanging mail on the embedded LMDB store.

A lead agent delegates three children, steers a running child, queues for a queued one,
lets two siblings talk, wakes a finished child, and then the process "crashes" with a
request half-built and mail in flight. The store is reopened, recovery runs, and every
accepted message is delivered exactly once, which the demo checks and prints.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import TextIO

from treemail.adapters.ids import SeededIds
from treemail.adapters.lmdb_store import LmdbStore
from treemail.adapters.transcript import render_event
from treemail.core.engine import Engine, Request
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner, Run, Session, ToolContext

__all__ = ["main", "run_demo"]


LEAD = AgentSpec("lead", "plans the work and delegates", Rules.of({"child": "allow"}))
EXPLORE = AgentSpec("explore", "maps the code base",
                    Rules.of({"parent": "allow", "sibling": "allow"}))
REVIEW = AgentSpec("review", "reviews the change", Rules.of({"parent": "allow", "sibling": "ask"}))
TESTER = AgentSpec("tester", "runs the test suite", Rules.of({"parent": "allow"}))


class Demo:
    def __init__(self, path: Path, out: TextIO) -> None:
        self.path = path
        self.out = out
        self.ids = SeededIds(7)
        self.store = LmdbStore.open(path)
        self.engine = Engine(self.store, self.ids)
        self.seen: dict[str, int] = {}
        self.calls = 0

    # -- narration -----------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"\n== {text}", file=self.out)

    def tail(self) -> None:
        """Print every event appended since the last tail: the live view of the log."""
        names = {s.session_id: s.reference for s in self.engine.sessions()}
        for session_id in names:
            for event in self.engine.events(session_id, self.seen.get(session_id, 0)):
                print(render_event(event, lambda sid: names.get(sid or "", "?")), file=self.out)
                self.seen[session_id] = event.seq

    # -- agent actions -------------------------------------------------------------------

    def start(self, session: Session) -> Run:
        return self.engine.start_run(session.session_id)

    def boundary(self, session: Session, run: Run) -> Request:
        request = self.engine.begin_request(session.session_id, run.run_id)
        for delivery in request.deliveries:
            text = delivery.text.replace("\n", "\n      | ")
            print(f"    {session.reference} reads:\n      | {text}", file=self.out)
        return request

    def turn(self, session: Session, run: Run) -> None:
        request = self.boundary(session, run)
        self.engine.commit_request(session.session_id, run.run_id, request.request_id)

    def send(self, session: Session, run: Run, to: str, body: str, mode: str = "steer") -> None:
        self.calls += 1
        ctx = ToolContext(session.session_id, run.run_id, f"call_{self.calls}")
        result = self.engine.send_message(ctx, {"to": to, "body": body, "mode": mode})
        print(f"    {session.reference} send_message(to={to!r}, mode={mode!r}) -> "
              f"{result.as_tool_result()}", file=self.out)

    def reopen(self) -> None:
        self.store.close()
        self.store = LmdbStore.open(self.path)
        self.engine = Engine(self.store, self.ids)
        dead = self.engine.recover()
        print(f"    store reopened; recovery found {dead} dead run(s)", file=self.out)

    def drain(self) -> None:
        """Run every session with a queued run until no mail is left anywhere."""
        while queued := [s for s in self.engine.sessions() if s.state == "queued"]:
            for session in queued:
                run = self.start(session)
                self.turn(session, run)
                self.engine.finish_run(session.session_id, run.run_id)


def run_demo(path: Path, out: TextIO) -> bool:
    demo = Demo(path, out)
    engine = demo.engine
    demo.say("A user asks the lead; the lead delegates three children")
    lead = engine.create_root(LEAD)
    engine.produce(lead.session_id, "Ship the parser fix with a review.", Owner.USER)
    lead_run = demo.start(lead)
    demo.turn(lead, lead_run)
    explore = engine.delegate(lead.session_id, EXPLORE, "Map the parser module.")
    review = engine.delegate(lead.session_id, REVIEW, "Review the parser fix.")
    tester = engine.delegate(lead.session_id, TESTER, "Run the parser tests.")
    demo.tail()

    demo.say("explore is running; the lead steers it, and queues for review, still queued")
    explore_run = demo.start(explore)
    demo.turn(explore, explore_run)
    demo.send(lead, lead_run, explore.reference, "Focus on tokenizer.py first.")
    demo.send(lead, lead_run, review.reference, "Explore will send you the hot spots.")
    demo.turn(explore, explore_run)
    demo.tail()

    demo.say("Siblings: explore tells review; review starts and claims all its mail")
    demo.send(explore, explore_run, review.reference, "Hot spots: tokenizer.py:120-180.")
    review_run = demo.start(review)
    demo.turn(review, review_run)
    demo.tail()

    demo.say("tester finishes its run; a message from the lead wakes it")
    tester_run = demo.start(tester)
    demo.turn(tester, tester_run)
    engine.finish_run(tester.session_id, tester_run.run_id)
    demo.send(lead, lead_run, tester.reference, "Please also run the fuzz tests.")
    demo.tail()

    demo.say("Crash: review is mid-request with mail claimed, tester's wake run not started")
    demo.send(explore, explore_run, review.reference, "Also check the error paths.")
    demo.boundary(review, review_run)
    demo.tail()
    demo.reopen()
    engine = demo.engine
    demo.tail()

    demo.say("After recovery (every run died with the process) each session drains its mail")
    demo.drain()
    demo.tail()
    return _verify(demo)


def _verify(demo: Demo) -> bool:
    """Every accepted message consumed exactly once, nothing pending, nothing lost."""
    accepted: set[str] = set()
    consumed: Counter[str] = Counter()
    for session in demo.engine.sessions():
        for event in demo.engine.events(session.session_id):
            message_id = str(event.data.get("message_id"))
            if event.kind == "ProducerMessageAccepted":
                accepted.add(message_id)
            elif event.kind == "ProducerMessageConsumed":
                consumed[message_id] += 1
    pending = sum(len(demo.engine.pending(s.session_id)) for s in demo.engine.sessions())
    exact = set(consumed) == accepted and all(n == 1 for n in consumed.values())
    demo.say("Check")
    print(f"    {len(accepted)} messages accepted, {sum(consumed.values())} consumed, "
          f"{pending} pending: {'each exactly once' if exact and not pending else 'MISMATCH'}",
          file=demo.out)
    demo.store.close()
    return exact and pending == 0


def main(path: str | None = None) -> int:
    if path is not None:
        return 0 if run_demo(Path(path), sys.stdout) else 1
    with tempfile.TemporaryDirectory(prefix="treemail-demo-") as tmp:
        return 0 if run_demo(Path(tmp) / "store", sys.stdout) else 1
