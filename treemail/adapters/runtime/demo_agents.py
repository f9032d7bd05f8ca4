"""The demo's scripted agents: a lead, and its explore, review and tester children.

Each agent's model is a ``Brain``: its replies are a script, one ``Step`` per model request
of its conversation (the turn count survives runs and restarts, since the runtime rebuilds the
history from the durable log). Before every reply the brain waits at its gate on the
``Stage`` until the demo releases it, so the demo decides who moves next and the transcript
reads the same on every run, however the event loop interleaves the actors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ToolCall
from treemail.adapters.runtime.runtime import Agent
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec

__all__ = ["EXPLORE", "LEAD", "REVIEW", "TESTER", "Brain", "Stage", "Step", "demo_agents"]

LEAD = AgentSpec("lead", "plans the work and delegates", Rules.of({"child": "allow"}))
EXPLORE = AgentSpec("explore", "maps the code base",
                    Rules.of({"parent": "allow", "sibling": "allow"}))
REVIEW = AgentSpec("review", "reviews the change", Rules.of({"parent": "allow", "sibling": "ask"}))
TESTER = AgentSpec("tester", "runs the test suite", Rules.of({"parent": "allow"}))


class Stage:
    """Where the brains wait for their turn, and the handles the demo tells them."""

    def __init__(self) -> None:
        self.roster: dict[str, str] = {}  # agent name -> session handle
        self._gates: dict[str, asyncio.Event] = {}

    def waiting(self, name: str) -> bool:
        """Whether ``name``'s model is parked at its gate (its actor writes nothing then)."""
        return name in self._gates

    async def turn(self, name: str) -> None:
        gate = asyncio.Event()
        self._gates[name] = gate
        try:
            await gate.wait()
        finally:  # released, or cancelled when the process "dies"
            if self._gates.get(name) is gate:
                del self._gates[name]

    def release(self, name: str) -> None:
        gate = self._gates.pop(name, None)
        if gate is None:
            raise RuntimeError(f"the demo script is out of step: {name}'s model is not waiting")
        gate.set()


@attrs.frozen
class Step:
    """One reply: a text, and tool calls as (tool, arguments). A ``to`` argument names an
    agent; the brain puts that agent's session handle in its place."""

    text: str | None = None
    calls: tuple[tuple[str, Mapping[str, str]], ...] = ()


def says(text: str) -> Step:
    return Step(text=text)


def sends(*messages: tuple[str, str, str]) -> Step:
    """send_message calls, each (recipient agent, mode, body)."""
    return Step(calls=tuple(("send_message", {"to": to, "mode": mode, "body": body})
                            for to, mode, body in messages))


def delegates(*tasks: tuple[str, str]) -> Step:
    return Step(calls=tuple(("delegate_subagent", {"agent": agent, "task": task})
                            for agent, task in tasks))


class Brain:
    """A scripted ``Model`` that waits at its gate before each reply."""

    def __init__(self, name: str, stage: Stage, script: Sequence[Step]) -> None:
        self.name = name
        self.stage = stage
        self.script = tuple(script)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(self.script):
            # Not a ModelError, which the runtime would retry: a bug of the demo's script,
            # which crashes the actor, and the demo reports it.
            raise RuntimeError(f"{self.name} has no scripted reply for turn {turn}")
        await self.stage.turn(self.name)
        step = self.script[turn]
        calls = tuple(ToolCall(f"call_{self.name}_{turn}_{i}", tool, self._resolve(arguments))
                      for i, (tool, arguments) in enumerate(step.calls, 1))
        return ModelReply(text=step.text, tool_calls=calls)

    def _resolve(self, arguments: Mapping[str, str]) -> dict[str, Any]:
        resolved: dict[str, Any] = dict(arguments)
        if "to" in resolved:
            resolved["to"] = self.stage.roster[resolved["to"]]
        return resolved


LEAD_SCRIPT = (
    delegates(("explore", "Map the parser module."), ("tester", "Run the parser tests.")),
    sends(("explore", "steer", "Focus on tokenizer.py first."),
          ("review", "steer", "Explore will send you the hot spots.")),
    says("Waiting for my subagents."),
    sends(("tester", "steer", "Please also run the fuzz tests.")),
    says("Fuzz results noted; waiting for explore and review."),
    says("Shipped: the parser fix is mapped, reviewed and tested."),
)
EXPLORE_SCRIPT = (
    sends(("lead", "steer", "Mapping the parser, starting with grammar.py.")),
    sends(("review", "steer", "Hot spots: tokenizer.py lines 120-180.")),
    says("Parser mapped: the hot spot is tokenizer.py lines 120-180."),
)
REVIEW_SCRIPT = (
    sends(("explore", "steer", "Ready for your hot spots; I will start with the diff.")),
    says("Reviewed tokenizer.py lines 120-180: approved."),
)
TESTER_SCRIPT = (
    says("All 212 parser tests pass."),
    sends(("lead", "steer", "Fuzz tests: no crash in 10k inputs.")),
    says("Done."),
)


def demo_agents(stage: Stage) -> dict[str, Agent]:
    scripts = {LEAD: LEAD_SCRIPT, EXPLORE: EXPLORE_SCRIPT, REVIEW: REVIEW_SCRIPT,
               TESTER: TESTER_SCRIPT}
    return {spec.name: Agent(spec, Brain(spec.name, stage, script))
            for spec, script in scripts.items()}
