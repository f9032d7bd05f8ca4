"""``treemail demo --connect``: a short demo driven through a running daemon, over protocol 19.

A user asks a lead. With the daemon's default scripted model (``scripted.py``) the agents
act on the directives in their docs below: the lead delegates explore and tester, steers
explore, explore answers it, tester delegates a reviewer, and each child's result comes back
to its parent: a tree of four sessions talking in both modes. The lead's rules say
``child: ask``, so its steer waits for the user: the demo names the held call and waits
until someone answers it (``treemail tui``, or ``treemail approve``), or answers it itself
with ``--approve``. Then the user steers one child and writes to another. Every step is
printed as the daemon's feed shows it (``treemail tail`` or ``treemail tui`` beside it show
the same rows live), and at the end every accepted message is checked to have been consumed
exactly once. With another model (``openai``) the same docs are prompts, and what the agents
say is up to it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.ui.feed import answer_line, view_row
from treemail.core.errors import TreemailError
from treemail.core.events import EventKind
from treemail.core.lifecycle import ApprovalState, SessionState
from treemail.protocol import methods as m
from treemail.protocol import types as t

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["SCENES", "Unanswered", "Unsettled", "main"]

_QUIET = (SessionState.IDLE, SessionState.FINISHED)  # no run queued or running
WAIT = 300.0  # seconds the demo waits for the user to answer its approval, by default
SETTLE = 600.0  # seconds its tree may run between two scenes: a slow real model takes minutes

LEAD = """---
name: demo_lead
description: Plans the fix and delegates its parts
permissions:
  message:
    child: ask
---
You lead the parser fix. Split the work, steer your children, and report.
delegate demo_explore: Find where the parser breaks.
delegate demo_tester: Write a failing test for the parser bug.
steer demo_explore: Look at the tokenizer first, then the nesting rules.
"""

EXPLORE = """---
name: demo_explore
description: Maps the code base and reports to its parent
permissions:
  message:
    parent: allow
    sibling: ask
---
You explore code and report what you find to your parent.
"""

TESTER = """---
name: demo_tester
description: Writes the failing test, has it reviewed
permissions:
  message:
    parent: allow
    child: allow
---
You write tests, and have each one reviewed before you report.
delegate demo_review: Review the new parser test.
"""

REVIEW = """---
name: demo_review
description: Reviews tests
permissions:
  message:
    parent: allow
---
You review tests and report to your parent.
"""


class Unanswered(Exception):
    """Nobody answered the demo's approval in time."""


class Unsettled(Exception):
    """The tree still had runs going when the demo stopped waiting: a slow model, most
    often, and said so in one line, never as a traceback."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"the demo's sessions were still running after {seconds:g}s (a slow or stuck "
            "model?); watch them with `treemail tail`, and check the daemon's log "
            "(DATA_DIR/daemon.log)")
        self.seconds = seconds


class Connected:
    def __init__(self, client: DaemonClient, *, approve: bool = False, wait: float = WAIT,
                 bar: Progress | None = None, settle_for: float = SETTLE) -> None:
        from treemail.adapters.ui.console import row_console

        self.client = client
        self.approve = approve  # answer the held call itself (unattended runs)
        self.wait = wait
        self.settle_for = settle_for
        self.out = row_console(bar)  # coloured rows on a terminal, the plain lines elsewhere
        self.scene: Callable[[str], None] = lambda heading: None  # progress, on a terminal
        self.shown = 0
        self.root = ""  # the demo's tree, once created
        self.names: dict[str, str] = {}

    def say(self, text: str) -> None:
        print(f"\n== {text}", flush=True)
        self.scene(text)

    async def settle(self, timeout: float | None = None) -> None:
        """Wait until no session has a run queued or running, but for runs held on an
        approval, and print the new rows; then have each held call answered, and again.
        ``Unsettled`` after ``timeout`` seconds (by default ``settle_for``: a real model may
        take minutes)."""
        limit = self.settle_for if timeout is None else timeout
        while True:
            try:
                held = await self._quiet(limit)
            except TimeoutError:
                await self._show()  # what did happen, before saying what did not
                raise Unsettled(limit) from None
            await self._show()
            if not held:
                return
            for approval in held:
                await self._answered(approval)

    async def _quiet(self, timeout: float) -> list[t.ApprovalView]:
        """The pending approvals, once every session is idle, finished, or held by one."""
        async with asyncio.timeout(timeout):
            while True:
                # Its own tree only: not an earlier run's, nor every session of the daemon.
                sessions = await self.client.every(
                    m.SESSION_LIST, t.SessionListParams(root_session_id=self.root))
                approvals = await self.client.request(
                    m.APPROVAL_LIST, t.ApprovalListParams(pending_only=True))
                self.names |= {s.session_id: s.handle or s.session_id for s in sessions}
                tree = {s.session_id: s for s in sessions}
                held = [a for a in approvals.approvals if a.session_id in tree]
                waiting = {a.session_id for a in held}
                if all(s.state in _QUIET or sid in waiting for sid, s in tree.items()):
                    return held
                await asyncio.sleep(0.05)

    async def _show(self) -> None:
        from treemail.adapters.ui.console import print_row

        while True:
            page = await self.client.request(m.EVENTS_READ,
                                             t.EventsReadParams(after=self.shown))
            for view in page.events:
                print_row(view_row(view, self.names), self.out)
            self.shown = page.next
            if self.shown >= page.head:
                return

    async def _answered(self, approval: t.ApprovalView) -> None:
        """Wait for the user's answer to ``approval`` (or give it, with ``approve``)."""
        arguments = approval.arguments or {}
        sender = self.names.get(approval.session_id, approval.session_id)
        self.say(f"{sender}'s {approval.tool} to {arguments.get('to', '?')} waits for "
                 f"your approval (a {approval.label} peer, and its rules ask)")
        print(f'    body: "{arguments.get("body", "")}"')
        if self.approve:
            print("    --approve: the demo answers it itself: approve, scope once", flush=True)
            answer = await self.client.request(m.APPROVAL_ANSWER, t.ApprovalAnswerParams(
                approval_id=approval.approval_id, approve=True, scope="once"))
        else:
            print("    answer it in `treemail tui` (a: approve once, s: for the session, t: for "
                  "the tree, d: deny),", flush=True)
            print(f"    or run `treemail approve {approval.approval_id}`; the demo waits "
                  f"{self.wait:g}s for it", flush=True)
            answer = await self._answer(approval.approval_id)
        print(f"    answered: {answer_line(msgspec.to_builtins(answer))}", flush=True)

    async def _answer(self, approval_id: str) -> t.ApprovalView:
        deadline = time.monotonic() + self.wait
        while time.monotonic() < deadline:
            every = (await self.client.request(
                m.APPROVAL_LIST, t.ApprovalListParams(pending_only=False))).approvals
            answer = next((a for a in every if a.approval_id == approval_id), None)
            if answer is not None and answer.state != ApprovalState.PENDING:
                return answer
            await asyncio.sleep(0.1)
        raise Unanswered(
            f"nobody answered approval {approval_id} within {self.wait:g}s; the call stays "
            f"held and its tree waits: answer it with `treemail approve {approval_id}` (or in "
            "`treemail tui`), or run the demo with --approve to have it answer itself")

    async def play(self) -> bool:
        self.shown = (await self.client.request(
            m.EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
        self.say("A user asks the lead; its model delegates, steers a child, reads replies")
        lead = await self.client.request(m.SESSION_CREATE, t.SessionCreateParams(
            agent_doc=LEAD, agent_docs=[EXPLORE, TESTER, REVIEW]))
        lid = self.root = lead.session_id
        await self.client.submit(lid, "Ship the parser fix, reviewed and tested.")
        await self.settle()
        tree = {s.agent: s.session_id for s in await self.client.every(
            m.SESSION_LIST, t.SessionListParams(root_session_id=lid))}
        self.say("The user steers explore and writes to tester")
        steer = await self.client.steer(tree["demo_explore"], "Look at the tokenizer first.")
        print(f"    steer: mode {steer.mode}, recipient {steer.recipient_state}")
        await self.client.submit(tree["demo_tester"], "Run the suite again.")
        await self.settle()
        receipt = await self.client.request(
            m.MESSAGE_GET, t.MessageGetParams(message_id=steer.message_id))
        print(f"    the steer's receipt: {receipt.message.state} after "
              f"{len(receipt.history)} steps")
        return await self.check(lid)

    async def check(self, root: str) -> bool:
        accepted: set[str] = set()
        consumed: Counter[str] = Counter()
        tree = await self.client.every(m.SESSION_LIST, t.SessionListParams(root_session_id=root))
        for session in tree:
            after = 0
            while True:
                page = await self.client.request(m.EVENTS_READ, t.EventsReadParams(
                    after=after, session_id=session.session_id))
                for view in page.events:
                    message_id: str = view.data.get("message_id", "")
                    if view.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED:
                        accepted.add(message_id)
                    elif view.kind == EventKind.PRODUCER_MESSAGE_CONSUMED:
                        consumed[message_id] += 1
                after = page.next
                if after >= page.head:
                    break
        exact = set(consumed) == accepted and all(n == 1 for n in consumed.values())
        self.say("Check")
        print(f"    {len(tree)} sessions, {len(accepted)} messages accepted, "
              f"{sum(consumed.values())} consumed: "
              f"{'each exactly once' if exact else 'MISMATCH'}", flush=True)
        return exact


SCENES = 4  # the headings a run says with one approval, Check included


async def _played(client: DaemonClient, approve: bool, wait: float,
                  settle_for: float) -> bool:
    """The demo, with a bar over its scenes on a terminal's stderr (the rows, on stdout,
    are the same either way)."""
    from treemail.adapters.ui.console import advance, steps

    with steps(SCENES, "demo --connect") as bar:
        demo = Connected(client, approve=approve, wait=wait, bar=bar, settle_for=settle_for)
        demo.scene = lambda heading: advance(bar, heading[:40])
        return await demo.play()


def main(address: str | Path, token: str | None = None, *, approve: bool = False,
         wait: float = WAIT, settle_for: float = SETTLE) -> int:
    async def go() -> int:
        try:
            client = await DaemonClient.connect(address, name="treemail demo", token=token)
        except OSError as exc:
            print(f"treemail demo: no daemon at {address} ({exc.strerror}); start one with "
                  "`treemail daemon`", file=sys.stderr)
            return 1
        except RpcFailure as failure:
            print(f"treemail demo: {failure.data_code}: {failure.error.message}",
                  file=sys.stderr)
            return 1
        except TreemailError as error:  # a TCP listener that did not prove itself
            print(f"treemail demo: {error}", file=sys.stderr)
            return 1
        try:
            return 0 if await _played(client, approve, wait, settle_for) else 1
        except RpcFailure as failure:
            print(f"treemail demo: {failure.data_code}: {failure.error.message}",
                  file=sys.stderr)
            return 1
        except (Unanswered, Unsettled) as unanswered:
            print(f"treemail demo: {unanswered}", file=sys.stderr)
            return 1
        except TreemailError as error:  # a call the daemon did not answer in time
            print(f"treemail demo: {error}", file=sys.stderr)
            return 1
        except ConnectionError:
            print("treemail demo: the daemon closed the connection: it stopped or died; "
                  "start it again with `treemail daemon`", file=sys.stderr)
            return 1
        finally:
            await client.close()

    return asyncio.run(go())
