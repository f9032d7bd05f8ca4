"""The daemon's scripted models: deterministic, offline stand-ins for an LLM.

``ScriptedAgent`` (``[daemon] model = "scripted"``, the default) reads its conversation the
way a model would, acts through the tools it is offered, and is steered by plain directives
in its agent doc's prompt, so a demo tree really converses with no network and no key:

* ``delegate AGENT: TASK`` lines: on its first task (user input or a delegated task) it
  calls ``delegate_subagent`` for each, all in one reply;
* ``steer AGENT: TEXT`` lines: once the delegation results name the children's handles, it
  sends each such child TEXT with ``send_message(mode="steer")``;
* agent mail whose envelope offers a reply (``[use send_message(to=...)]``) is answered with
  ``send_message(mode="queue")``, unless it is itself an answer (its body starts "Re:"), so
  two agents never answer each other forever;
* otherwise it ends its turn saying what it read; for a delegated child that text is its
  result, which its parent receives as a ``<subagent_result>``.

Every rule fires at most once per piece of input, so each run ends in a few requests.
``ScriptedEcho`` (``model = "echo"``) only notes what it read: the cheapest load for soaks.
``delay`` (``[daemon.scripted] delay``, seconds) keeps each reply in flight that long, so a
client can steer a run or call tools as it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ToolCall
from treemail.core import results

__all__ = ["Plan", "ScriptedAgent", "ScriptedEcho"]

_DIRECTIVE = re.compile(r"^\s*[-*]?\s*(delegate|steer)\s+([\w.-]+)\s*:\s*(.+?)\s*$",
                        re.MULTILINE | re.IGNORECASE)
_MAIL = re.compile(r'<agent_message from="([^"]+)">\n(.*?)\n</agent_message>', re.DOTALL)
_HINT = re.compile(r'\n\n\[use `send_message\(to="[^"]+", \.\.\.\)` to reply\]$')
_RESULT = re.compile(r'<subagent_result from="([^"]+)">\n(.*?)\n</subagent_result>', re.DOTALL)


class ScriptedEcho:
    """It reads its last input and says so, then ends the run."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        if self.delay:
            await asyncio.sleep(self.delay)
        last = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"),
                    None)
        return ModelReply(text=f"noted: {_first_line(last)}")


@attrs.frozen
class Plan:
    """The directives of a prompt: (agent, task) to delegate and (agent, text) to steer."""

    delegate: tuple[tuple[str, str], ...] = ()
    steer: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, prompt: str) -> Plan:
        found = [(m[1].lower(), m[2], m[3]) for m in _DIRECTIVE.finditer(prompt)]
        return cls(tuple((a, t) for kind, a, t in found if kind == "delegate"),
                   tuple((a, t) for kind, a, t in found if kind == "steer"))


@attrs.frozen
class Mail:
    sender: str
    body: str
    replyable: bool


class ScriptedAgent:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> ModelReply:
        if self.delay:
            await asyncio.sleep(self.delay)
        offered = {str(t.get("function", {}).get("name")) for t in tools}
        prompt = str(messages[0].get("content") or "") if messages and messages[0].get(
            "role") == "system" else ""
        turn, plan = Turn(messages), Plan.of(prompt)
        calls = [*self._steers(plan, turn, offered), *self._replies(turn, offered),
                 *self._delegations(plan, turn, offered)]
        if calls:
            return ModelReply(tool_calls=tuple(
                ToolCall(f"scripted-{turn.number}-{i}", name, args)
                for i, (name, args) in enumerate(calls)))
        return ModelReply(text=turn.summary())

    @staticmethod
    def _steers(plan: Plan, turn: Turn, offered: set[str]) -> list[tuple[str, dict[str, Any]]]:
        if "send_message" not in offered:
            return []
        handles = turn.delegated_now()
        return [("send_message", {"to": handles[agent], "body": text, "mode": "steer"})
                for agent, text in plan.steer if agent in handles]

    @staticmethod
    def _replies(turn: Turn, offered: set[str]) -> list[tuple[str, dict[str, Any]]]:
        if "send_message" not in offered:
            return []
        return [("send_message", {"to": mail.sender, "mode": "queue",
                                  "body": f"Re: {_first_line(mail.body)}: on it, thanks."})
                for mail in turn.mail() if mail.replyable and not mail.body.startswith("Re:")]

    @staticmethod
    def _delegations(plan: Plan, turn: Turn,
                     offered: set[str]) -> list[tuple[str, dict[str, Any]]]:
        if "delegate_subagent" not in offered or turn.has_delegated() or not turn.tasks():
            return []
        return [("delegate_subagent", {"agent": agent, "task": task, "description": None})
                for agent, task in plan.delegate]


class Turn:
    """The conversation as the model sees it: what came since its last reply, and before."""

    def __init__(self, messages: Sequence[ChatMessage]) -> None:
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
                   default=-1)
        self.before = list(messages[:last + 1])
        self.new = list(messages[last + 1:])
        self.number = sum(1 for m in messages if m.get("role") == "assistant")

    def _inputs(self) -> list[str]:
        return [str(m.get("content") or "") for m in self.new if m.get("role") == "user"]

    def mail(self) -> list[Mail]:
        found = []
        for text in self._inputs():
            for sender, inner in _MAIL.findall(text):
                body = _HINT.sub("", inner)
                found.append(Mail(sender, body, replyable=body != inner))
        return found

    def tasks(self) -> list[str]:
        """Inputs that are neither agent mail nor a child's result: user input, tasks."""
        return [t for t in self._inputs()
                if not _MAIL.search(t) and not _RESULT.search(t) and t.strip()]

    def has_delegated(self) -> bool:
        return any(call["function"]["name"] == "delegate_subagent"
                   for m in self.before for call in m.get("tool_calls") or ())

    def delegated_now(self) -> dict[str, str]:
        """The children the previous reply delegated, by agent name: their handles, from
        the tool results that just came back."""
        asked = {call["id"]: results.read_text(str(call["function"]["arguments"])).get("agent")
                 for m in self.before[-1:] for call in m.get("tool_calls") or ()
                 if call["function"]["name"] == "delegate_subagent"}
        handles = {}
        for m in self.new:
            if m.get("role") == "tool" and m.get("tool_call_id") in asked:
                result = results.read_text(str(m.get("content") or ""))
                if isinstance(result.get("handle"), str):
                    handles[str(asked[m["tool_call_id"]])] = result["handle"]
        return handles

    def summary(self) -> str:
        parts = [f"{child} reported: {_first_line(result)}"
                 for text in self._inputs() for child, result in _RESULT.findall(text)]
        parts += [f"{mail.sender} wrote: {_first_line(mail.body)}" for mail in self.mail()]
        parts += [f"done: {_first_line(task)}" for task in self.tasks()]
        parts += [_outcome(results.read_text(str(m.get("content") or "")))
                  for m in self.new if m.get("role") == "tool"]
        return "; ".join(parts) or "noted: (nothing new)"


def _outcome(result: dict[str, Any]) -> str:
    """One tool result, as the model's closing line says it."""
    if "handle" in result:
        return f"delegated {result['handle']}"
    if "message_id" in result:
        return f"message sent ({result.get('mode')}, recipient {result.get('recipient_state')})"
    return f"a call failed: {result.get('error', 'unknown')}"


def _first_line(text: object) -> str:
    lines = str(text or "").strip().splitlines()
    line = lines[0] if lines else "(nothing)"
    return line if len(line) <= 120 else line[:117] + "..."
