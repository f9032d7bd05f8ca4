"""``treemail demo --connect``: a short demo driven through a running daemon, over protocol 19.

A user asks a lead. With the daemon's default scripted model (``scripted.py``) the agents
act on the directives in their docs below: the lead delegates explore and tester, steers
explore, explore answers it, tester delegates a reviewer, and each child's result comes back
to its parent: a tree of four sessions talking in both modes. Then the user steers one child
and writes to another. Every step is printed as the daemon's feed shows it (run
``treemail tail`` beside it to watch the same rows live), and at the end every accepted
message is checked to have been consumed exactly once. With another model (``openai``) the
same docs are prompts, and what the agents say is up to it.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState

__all__ = ["main"]

_QUIET = (SessionState.IDLE, SessionState.FINISHED)  # no run queued or running


def _row(view: dict[str, Any], names: dict[str, str]) -> str:
    from treemail.adapters.daemon.commands import row

    return row(view, names)

LEAD = """---
name: demo_lead
description: Plans the fix and delegates its parts
permissions:
  message:
    child: allow
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


class Connected:
    def __init__(self, client: DaemonClient) -> None:
        self.client = client
        self.shown = 0
        self.names: dict[str, str] = {}

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.client.call(method, params)

    def say(self, text: str) -> None:
        print(f"\n== {text}", flush=True)

    async def settle(self, timeout: float = 60.0) -> None:
        """Wait until no session has a run queued or running, then print the new rows."""
        async with asyncio.timeout(timeout):
            while True:
                sessions = (await self.call("session.list", {}))["sessions"]
                self.names = {s["session_id"]: s["handle"] or s["session_id"] for s in sessions}
                if all(s["state"] in _QUIET for s in sessions):
                    break
                await asyncio.sleep(0.05)
        while True:
            page = await self.call("events.read", {"after": self.shown})
            for view in page["events"]:
                print(_row(view, self.names), flush=True)
            self.shown = page["next"]
            if self.shown >= page["head"]:
                return

    async def play(self) -> bool:
        self.shown = (await self.call("events.read", {"after": 0, "limit": 1}))["head"]
        self.say("A user asks the lead; its model delegates, steers a child, reads replies")
        lead = await self.call("session.create", {"agent_doc": LEAD,
                                                  "agent_docs": [EXPLORE, TESTER, REVIEW]})
        lid = lead["session_id"]
        await self.call("run.submit", {"session_id": lid,
                                       "text": "Ship the parser fix, reviewed and tested."})
        await self.settle()
        tree = {s["agent"]: s["session_id"]
                for s in (await self.call("session.list", {"root_session_id": lid}))["sessions"]}
        self.say("The user steers explore and writes to tester")
        steer = await self.call("run.steer", {"session_id": tree["demo_explore"],
                                              "text": "Look at the tokenizer first."})
        print(f"    steer: mode {steer['mode']}, recipient {steer['recipient_state']}")
        await self.call("run.submit", {"session_id": tree["demo_tester"],
                                       "text": "Run the suite again."})
        await self.settle()
        receipt = await self.call("message.get", {"message_id": steer["message_id"]})
        print(f"    the steer's receipt: {receipt['message']['state']} after "
              f"{len(receipt['history'])} steps")
        return await self.check(lid)

    async def check(self, root: str) -> bool:
        accepted: set[str] = set()
        consumed: Counter[str] = Counter()
        tree = (await self.call("session.list", {"root_session_id": root}))["sessions"]
        for session in tree:
            page = await self.call("events.read", {"after": 0, "session_id": session["session_id"]})
            after = 0
            while True:
                for view in page["events"]:
                    message_id = view["data"].get("message_id")
                    if view["kind"] == EventKind.PRODUCER_MESSAGE_ACCEPTED:
                        accepted.add(message_id)
                    elif view["kind"] == EventKind.PRODUCER_MESSAGE_CONSUMED:
                        consumed[message_id] += 1
                after = page["next"]
                if after >= page["head"]:
                    break
                page = await self.call("events.read",
                                       {"after": after, "session_id": session["session_id"]})
        exact = set(consumed) == accepted and all(n == 1 for n in consumed.values())
        self.say("Check")
        print(f"    {len(tree)} sessions, {len(accepted)} messages accepted, "
              f"{sum(consumed.values())} consumed: "
              f"{'each exactly once' if exact else 'MISMATCH'}")
        return exact


def main(address: str | Path, token: str | None = None) -> int:
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
        try:
            return 0 if await Connected(client).play() else 1
        except RpcFailure as failure:
            print(f"treemail demo: {failure.data_code}: {failure.error.message}",
                  file=sys.stderr)
            return 1
        finally:
            await client.close()

    return asyncio.run(go())
