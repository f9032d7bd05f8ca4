"""The daemon's default scripted model: it delegates, steers and answers as its prompt's
directives and its inputs say, each rule once, and always comes to an end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from treemail.adapters.daemon.scripted import Plan, ScriptedAgent
from treemail.adapters.runtime.llm import ModelReply
from treemail.core.envelope import render_envelope, render_subagent_result
from treemail.core.records import RecipientState
from treemail.core.tools import TOOL_NAMES, tool_definitions

PROMPT = """You lead.
delegate explore: Find the bug.
- delegate tester: Write a test.
steer explore: Tokenizer first.
"""
ALL = tool_definitions(TOOL_NAMES)


def _reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]] = ALL) -> ModelReply:
    return asyncio.run(ScriptedAgent().complete(messages, tools))


def _calls(reply: ModelReply) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, dict(c.arguments) if isinstance(c.arguments, dict) else {})
            for c in reply.tool_calls]


def _after(history: list[dict[str, Any]], reply: ModelReply,
           results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*history, reply.as_message(), *[
        {"role": "tool", "tool_call_id": c.id, "content": json.dumps(r)}
        for c, r in zip(reply.tool_calls, results, strict=True)]]


def test_the_plan_reads_delegate_and_steer_lines() -> None:
    assert Plan.of(PROMPT) == Plan((("explore", "Find the bug."), ("tester", "Write a test.")),
                                   (("explore", "Tokenizer first."),))


def test_a_task_is_delegated_then_the_child_steered_then_the_turn_ends() -> None:
    history = [{"role": "system", "content": PROMPT}, {"role": "user", "content": "Fix it."}]
    first = _reply(history)
    assert _calls(first) == [
        ("delegate_subagent", {"agent": "explore", "task": "Find the bug.", "description": None}),
        ("delegate_subagent", {"agent": "tester", "task": "Write a test.", "description": None})]
    history = _after(history, first, [{"handle": "explore_1"}, {"handle": "tester_2"}])
    second = _reply(history)
    assert _calls(second) == [("send_message", {"to": "explore_1", "body": "Tokenizer first.",
                                                "mode": "steer"})]
    history = _after(history, second, [{"message_id": "m", "mode": "steer",
                                        "recipient_state": RecipientState.RUNNING}])
    third = _reply(history)
    assert third.tool_calls == () and third.text == "message sent (steer, recipient running)"
    # Ids of calls differ from turn to turn: they key the idempotency of sends.
    assert {c.id for c in first.tool_calls}.isdisjoint(c.id for c in second.tool_calls)
    # A later task does not delegate again.
    later = _reply([*history, third.as_message(), {"role": "user", "content": "Again."}])
    assert later.tool_calls == () and later.text == "done: Again."


def test_mail_that_offers_a_reply_is_answered_once_and_answers_are_not() -> None:
    asked = render_envelope("lead_1", "Where is it?", reply_hint=True)
    reply = _reply([{"role": "user", "content": asked}])
    assert _calls(reply) == [("send_message", {"to": "lead_1", "mode": "queue",
                                               "body": "Re: Where is it?: on it, thanks."})]
    answer = render_envelope("child_1", "Re: Where is it?: on it, thanks.", reply_hint=True)
    done = _reply([{"role": "user", "content": answer}])
    assert done.tool_calls == () and done.text == "child_1 wrote: Re: Where is it?: on it, thanks."
    no_hint = render_envelope("lead_1", "FYI", reply_hint=False)
    assert _reply([{"role": "user", "content": no_hint}]).tool_calls == ()


def test_without_the_tools_it_only_says_what_it_read() -> None:
    history = [{"role": "system", "content": PROMPT}, {"role": "user", "content": "Fix it."},
               {"role": "user", "content": render_envelope("p", "hi", reply_hint=True)},
               {"role": "user", "content": render_subagent_result("kid_3", "found it\nmore")}]
    said = _reply(history, tools=[])
    assert said.tool_calls == ()
    assert said.text == "kid_3 reported: found it; p wrote: hi; done: Fix it."
