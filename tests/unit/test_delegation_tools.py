"""The delegation tools answer with their own ``delegation:*`` codes (never ``send_message:*``),
and every race between a tool call and another actor's work is answered typed.

A race is staged with ``Racing``: the runtime's writer, which runs another actor's work
before a given job of the tool call, exactly where the runtime could schedule it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from treemail.adapters.runtime.llm import ToolCall
from treemail.adapters.runtime.toolbox import ToolBox
from treemail.core import events
from treemail.core.engine import Engine
from treemail.core.errors import (
    DelegatingRunEnded,
    DelegationDenied,
    InvalidToolArguments,
    NotASubagent,
    UnknownAgent,
    UnknownSubagent,
)
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import RunState, SessionState
from treemail.core.memory_store import MemoryStore
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner, Session

KID = AgentSpec("kid", "helps", Rules.of({"parent": "allow"}))
LEAD = AgentSpec("lead", "leads", Rules.of({"child": "allow"}),
                 delegate_rules=Rules.of({"kid": "allow", "*": "deny"}))
AGENTS = {"kid": KID, "lead": LEAD, "other": AgentSpec("other")}


class Racing:
    """Runs writer jobs directly; before job number ``at`` it runs ``meanwhile`` first."""

    def __init__(self) -> None:
        self.jobs = 0
        self.at = 0
        self.meanwhile: Callable[[], None] = lambda: None
        self.ran = False

    def before_job(self, at: int, meanwhile: Callable[[], None]) -> None:
        self.jobs, self.at, self.meanwhile, self.ran = 0, at, meanwhile, False

    def settle(self) -> None:
        """Let the other actor's work happen if the tool call gave it no gap to happen in."""
        if not self.ran:
            self.ran = True
            self.meanwhile()

    async def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.jobs += 1
        if self.jobs == self.at:
            self.settle()
        return fn(*args, **kwargs)


class Tree:
    def __init__(self) -> None:
        self.engine = Engine(MemoryStore(), CountingIds(), agents=AGENTS.get)
        self.writer = Racing()
        self.box = ToolBox(self.engine, self.writer, AGENTS)
        self.lead = self.engine.create_root(LEAD)
        self.engine.accept(self.lead.session_id, "go", Owner.USER)
        self.run_id = self.engine.start_run(self.lead.session_id).run_id

    def call(self, name: str, **arguments: object) -> dict[str, Any]:
        lead = self.engine.session(self.lead.session_id)
        outcome = asyncio.run(self.box.execute(lead, self.run_id,
                                               ToolCall(f"c{name}", name, dict(arguments))))
        answer: dict[str, Any] = json.loads(outcome.content)
        return answer

    def kid(self) -> Session:
        return self.engine.delegate(self.lead.session_id, KID, "work")

    def run_to_the_end(self, session: Session, text: str) -> None:
        """The child's model replies ``text`` and its run finishes (queued runs started)."""
        run = self.engine.start_run(session.session_id)
        request = self.engine.begin_request(session.session_id, run.run_id)
        self.engine.commit_request(session.session_id, run.run_id, request.request_id,
                                   events.Reply(text=text))
        self.engine.finish_run(session.session_id, run.run_id, text)


@pytest.fixture
def tree() -> Tree:
    return Tree()


def test_delegate_refusals_have_delegation_codes(tree: Tree) -> None:
    assert tree.call("delegate_subagent", agent="ghost", task="t")["error"] == (
        UnknownAgent.code)
    assert tree.call("delegate_subagent", agent="other", task="t")["error"] == (
        DelegationDenied.code)
    assert len(tree.engine.sessions()) == 1


@pytest.mark.parametrize("task", ["", " ", "\n\t", "\u3000"])
def test_a_delegation_without_a_task_is_an_argument_error(tree: Tree, task: str) -> None:
    """Empty like empty mail: the model is told to give a task, and no child is made."""
    answer = tree.call("delegate_subagent", agent="kid", task=task)
    assert answer["error"] == InvalidToolArguments.code, answer
    assert "'task'" in answer["message"]
    assert len(tree.engine.sessions()) == 1


def test_a_reference_that_is_not_a_subagent_has_delegation_codes(tree: Tree) -> None:
    kid = tree.kid()
    grandchild = tree.engine.delegate(kid.session_id, KID, "deeper")
    stranger = tree.engine.create_root(LEAD)
    for name in ("get_subagent_result", "cancel_subagent"):
        for reference, code in [
            ("00000000-0000-4000-8000-00000000dead", UnknownSubagent.code),
            ("nobody_1", UnknownSubagent.code),
            (stranger.session_id, NotASubagent.code),  # another tree
            (grandchild.reference, NotASubagent.code),
            (grandchild.session_id, NotASubagent.code),
        ]:
            answer = tree.call(name, to=reference)
            assert answer["error"] == code, (name, reference, answer)
            assert kid.reference in answer["message"]  # the subagents it can address
    assert tree.engine.session(kid.session_id).state == SessionState.QUEUED  # nothing was cancelled


def test_get_subagent_result_while_the_child_finishes_sees_it_whole(tree: Tree) -> None:
    kid = tree.kid()
    # The other actor: the child's run finishes with its final reply, between the tool's
    # lookup of the child and its read of the child's log (two writer jobs before the fix).
    tree.writer.before_job(2, lambda: tree.run_to_the_end(kid, "final answer"))
    answer = tree.call("get_subagent_result", to=kid.reference)
    tree.writer.settle()
    # A status from before the finish with the result from after it was the old answer.
    assert answer in ({"status": RunState.QUEUED, "result": None},
                      {"status": RunState.FINISHED, "result": "final answer"}), answer


def test_cancel_when_the_child_finishes_meanwhile_is_an_answer(tree: Tree) -> None:
    kid = tree.kid()
    tree.writer.before_job(2, lambda: tree.run_to_the_end(kid, "done"))
    answer = tree.call("cancel_subagent", to=kid.reference)
    tree.writer.settle()
    # Either the cancel came first (the finish then ran the run queued after it), or the
    # finish did and the cancel says so; never an error.
    assert answer in ({"cancelled": True},
                      {"cancelled": False, "status": RunState.FINISHED}), answer


def test_delegate_while_the_callers_run_ends_creates_nothing(tree: Tree) -> None:
    # The other actor: the lead's run is cancelled (by the user) just before the delegation's
    # writer job; the old tool created a subagent of a run that no longer existed.
    tree.writer.before_job(1, lambda: tree.engine.cancel_run(
        tree.lead.session_id, tree.run_id, "cancelled by the user"))
    answer = tree.call("delegate_subagent", agent="kid", task="t")
    assert answer["error"] == DelegatingRunEnded.code, answer
    assert len(tree.engine.sessions()) == 1
