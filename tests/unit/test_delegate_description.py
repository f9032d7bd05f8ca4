"""delegate_subagent's ``description`` is kept: stored on the child session, and shown where
peers are told apart (the unknown-reference candidate list), in the log and in the transcript.
Two workers of one agent doc differ only by it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from treemail.adapters.runtime.llm import ToolCall
from treemail.adapters.runtime.toolbox import ToolBox
from treemail.adapters.ui.transcript import Transcript, render_log
from treemail.core.engine import Engine
from treemail.core.errors import InvalidToolArguments, UnknownSubagentReference
from treemail.core.ids import CountingIds
from treemail.core.memory_store import MemoryStore
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner

WORKER = AgentSpec("worker", "does a task", Rules.of({"parent": "allow", "sibling": "allow"}))
LEAD = AgentSpec("lead", "leads", Rules.of({"child": "allow"}),
                 delegate_rules=Rules.of({"worker": "allow"}))
AGENTS = {"worker": WORKER, "lead": LEAD}


async def _direct(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


class Lead:
    def __init__(self) -> None:
        self.engine = Engine(MemoryStore(), CountingIds(), agents=AGENTS.get)
        self.box = ToolBox(self.engine, _direct, AGENTS)
        self.session = self.engine.create_root(LEAD)
        self.engine.accept(self.session.session_id, "go", Owner.USER)
        self.run_id = self.engine.start_run(self.session.session_id).run_id

    def call(self, name: str, **arguments: object) -> dict[str, Any]:
        lead = self.engine.session(self.session.session_id)
        outcome = asyncio.run(self.box.execute(
            lead, self.run_id, ToolCall(f"c{len(arguments)}{name}", name, dict(arguments))))
        answer: dict[str, Any] = json.loads(outcome.content)
        return answer


def test_two_workers_of_one_doc_are_told_apart_by_their_description() -> None:
    lead = Lead()
    tests = lead.call("delegate_subagent", agent="worker", task="t1",
                      description="runs the parser tests")
    docs = lead.call("delegate_subagent", agent="worker", task="t2",
                     description="proofreads the docs")
    bare = lead.call("delegate_subagent", agent="worker", task="t3", description=None)
    stored = {s.session_id: s.description for s in lead.engine.sessions()}
    assert stored[tests["session_id"]] == "runs the parser tests"
    assert stored[docs["session_id"]] == "proofreads the docs"
    assert stored[bare["session_id"]] == ""

    miss = lead.call("send_message", to="worker_nobody", body="hi")
    assert miss["error"] == UnknownSubagentReference.code
    lines = miss["message"].splitlines()
    assert any(tests["handle"] in line and "runs the parser tests" in line for line in lines)
    assert any(docs["handle"] in line and "proofreads the docs" in line for line in lines)
    # With none given, the agent doc's own description stands in.
    assert any(bare["handle"] in line and "does a task" in line for line in lines)

    log = render_log(lead.engine.events(tests["session_id"]), lead.engine.sessions())
    assert any("session created" in line and "runs the parser tests" in line for line in log)
    transcript = Transcript()
    transcript.extend(lead.engine.events(docs["session_id"]))
    assert any("proofreads the docs" in line for line in transcript.lines())


def test_a_description_that_is_not_text_is_refused_and_nothing_is_created() -> None:
    lead = Lead()
    for bad in (7, "\ud800 lone"):
        answer = lead.call("delegate_subagent", agent="worker", task="t", description=bad)
        assert answer["error"] == InvalidToolArguments.code, answer
    assert len(lead.engine.sessions()) == 1
