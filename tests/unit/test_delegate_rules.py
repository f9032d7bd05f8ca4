"""permissions.delegate: which agents an agent may delegate to, and tool visibility."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from treemail.adapters.runtime.llm import ToolCall
from treemail.adapters.runtime.toolbox import ToolBox
from treemail.core.agents import BUILTIN_AGENTS, parse_agent_doc
from treemail.core.engine import Engine
from treemail.core.errors import AgentDocError, DelegationDenied, InvalidToolArguments
from treemail.core.ids import CountingIds
from treemail.core.memory_store import MemoryStore
from treemail.core.records import AgentSpec, Owner

LEAD = """---
name: lead
permissions:
  delegate:
    explore: allow
    "*": deny
---
"""


def test_delegate_rules_parse_and_decide() -> None:
    spec = parse_agent_doc(LEAD, "lead.md").spec
    assert spec.may_delegate("explore") and not spec.may_delegate("default")
    assert spec.delegates
    nobody = parse_agent_doc(LEAD.replace("explore: allow", "explore: deny"), "x.md").spec
    assert not nobody.delegates
    assert BUILTIN_AGENTS["default"].may_delegate("anything")  # no rules: any agent


def test_ask_is_not_a_delegate_action() -> None:
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(LEAD.replace("explore: allow", "explore: ask"), "lead.md")
    assert caught.value.details["field"] == "permissions.delegate.explore"
    assert "lead.md" in caught.value.message


async def _direct(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def test_toolbox_enforces_delegate_rules_and_hides_the_tools_when_all_denied() -> None:
    engine = Engine(MemoryStore(), CountingIds())
    lead_spec = parse_agent_doc(LEAD, "lead.md").spec
    agents = {"explore": AgentSpec("explore"), "default": AgentSpec("default")}
    box = ToolBox(engine, _direct, agents)
    lead = engine.create_root(lead_spec)
    engine.accept(lead.session_id, "go", Owner.USER)
    run = engine.start_run(lead.session_id)

    def delegate(agent: str) -> dict[str, Any]:
        call = ToolCall(f"d-{agent}", "delegate_subagent",
                        {"agent": agent, "task": "look", "description": None})
        outcome = asyncio.run(box.execute(lead, run.run_id, call))
        result: dict[str, Any] = json.loads(outcome.content)
        return result

    assert "handle" in delegate("explore")
    assert delegate("default")["error"] == DelegationDenied.code
    assert len(engine.sessions()) == 2  # the refused delegation created nothing
    closed = engine.create_root(parse_agent_doc(LEAD.replace("explore: allow", "explore: deny"),
                                                "x.md").spec)
    assert "delegate_subagent" not in box.visible(closed)
    assert "delegate_subagent" in box.visible(lead)


def test_delegate_errors_name_the_file_the_field_and_the_fix() -> None:
    bad_shape = LEAD.replace("  delegate:\n    explore: allow\n    \"*\": deny\n",
                             "  delegate: explore\n")
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(bad_shape, "lead.md")
    assert caught.value.message == (
        "lead.md: permissions.delegate must be a mapping of agent name to allow|deny")
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(LEAD.replace("explore: allow", "explore: maybe"), "lead.md")
    assert caught.value.details["source"] == "lead.md"
    assert "lead.md" in caught.value.message
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(LEAD.replace("explore: allow", "explore: ask"), "lead.md")
    assert caught.value.message == ("lead.md: permissions.delegate.explore must be allow or "
                                    "deny: delegation has no approval flow")


@pytest.mark.parametrize(("name", "arguments", "extra"), [
    ("delegate_subagent", {"agent": "explore", "task": "look", "priority": "high"}, "priority"),
    ("get_subagent_result", {"to": "explore_00000000", "verbose": True}, "verbose"),
    ("cancel_subagent", {"to": "explore_00000000", "force": 1}, "force"),
])
def test_delegation_tools_refuse_unknown_arguments_by_name(
    name: str, arguments: dict[str, Any], extra: str
) -> None:
    engine = Engine(MemoryStore(), CountingIds())
    box = ToolBox(engine, _direct, {"explore": AgentSpec("explore")})
    lead = engine.create_root(parse_agent_doc(LEAD, "lead.md").spec)
    engine.accept(lead.session_id, "go", Owner.USER)
    run = engine.start_run(lead.session_id)
    outcome = asyncio.run(box.execute(lead, run.run_id, ToolCall("c1", name, arguments)))
    result = json.loads(outcome.content)
    assert result["error"] == InvalidToolArguments.code
    assert f"has no argument {extra!r}" in result["message"]
    assert len(engine.sessions()) == 1  # nothing was delegated
