"""Whole model replies as a hostile model emits them, and the checks every one must pass.

A reply is text (or none) plus tool calls with hostile ids (empty, huge, control characters,
lone surrogates, 130 emoji, the same id twice), tool names on and off the surface, and
arguments from the tool schemas, arbitrary JSON, huge strings, raw text or the wrong types.
``run_reply`` runs one through a real ``Runtime`` whose root delegates to a child, and
``assert_sound`` checks what the actor made of it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.conftest import TALLY
from tests.fuzz.strategies import JSON, TEXT, arguments
from tests.unit.conftest import agent
from treemail.adapters.runtime.failures import FailurePolicy
from treemail.adapters.runtime.llm import ChatMessage, Model, ModelError, ModelReply, ToolCall
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.core import errors
from treemail.core.events import EventKind
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.records import Owner, Session
from treemail.core.store import Store
from treemail.core.tools import TOOL_NAMES

__all__ = ["REPLIES", "Outcome", "assert_sound", "run_reply"]

QUIET = 20.0  # seconds for the runtime to settle: longer is a hang
CODES = {cls.code for cls in vars(errors).values()
         if isinstance(cls, type) and issubclass(cls, errors.TreemailError)}

IDS = st.one_of(TEXT, st.sampled_from(("c1", "c1", "call_0", "x" * 5000)),
                st.text(min_size=200, max_size=400))
VALID = st.sampled_from(TOOL_NAMES)
NAMES = st.one_of(VALID, VALID, st.sampled_from(("steer_subagent", "", "SEND_MESSAGE")), TEXT)
HUGE = st.sampled_from(("b" * 300_000, "\ud800" * 1000, "😀" * 70_000))
KID = "@kid"  # replaced by the child's handle once it exists
PEER = st.sampled_from((KID, KID, "root", ""))
BODY = st.one_of(TEXT, HUGE)
# Well-formed arguments aimed at the real child, so calls also succeed, besides the rest.
AIMED = {
    "send_message": st.fixed_dictionaries(
        {"to": PEER, "body": BODY}, optional={"mode": st.sampled_from(("steer", "queue"))}),
    "delegate_subagent": st.fixed_dictionaries(
        {"agent": st.sampled_from(("kid", "root", "nobody")), "task": BODY}),
    "get_subagent_result": st.fixed_dictionaries({"to": PEER}),
    "cancel_subagent": st.fixed_dictionaries({"to": PEER}),
    # Any message id: the sender's own, another's or none; refused alike unless its own.
    "message_status": st.fixed_dictionaries({"message_id": TEXT}),
    "cancel_message": st.fixed_dictionaries({"message_id": TEXT}),
}


@st.composite
def tool_calls(draw: st.DrawFn) -> ToolCall:
    name = draw(NAMES)
    known = name if name in TOOL_NAMES else "send_message"
    args = draw(st.one_of(AIMED[known], AIMED[known], arguments(known),
                          st.text(max_size=50), JSON))
    return ToolCall(draw(IDS), name, args)


def aim(reply: ModelReply, kid: str) -> ModelReply:
    """``reply`` with every argument ``@kid`` naming the child."""
    def fix(call: ToolCall) -> ToolCall:
        if not isinstance(call.arguments, dict):
            return call
        return ToolCall(call.id, call.name, {k: kid if v == KID else v
                                             for k, v in call.arguments.items()})

    return ModelReply(reply.text, tuple(fix(c) for c in reply.tool_calls))


@st.composite
def _replies(draw: st.DrawFn) -> ModelReply:
    text = draw(st.one_of(st.none(), TEXT, HUGE))
    calls = draw(st.lists(tool_calls(), max_size=4))
    return ModelReply(text=text, tool_calls=tuple(calls))


REPLIES = _replies()


class Once:
    """Answers ``first`` (a reply, or an exception to raise), then text that ends the run."""

    def __init__(self, first: ModelReply | Model) -> None:
        self.first: ModelReply | Model | None = first
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(self, messages: Sequence[ChatMessage],
                       tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
        self.seen.append([dict(m) for m in messages])
        first, self.first = self.first, None
        if first is None:
            return ModelReply(text="done")
        if isinstance(first, ModelReply):
            return first
        return await first.complete(messages, tools)


class Outcome:
    def __init__(self, rt: Runtime, root: Session, model: Once, before: int,
                 again: str) -> None:
        self.rt, self.root, self.model, self.before, self.again = rt, root, model, before, again


def run_reply(store: Store, first: ModelReply | Model,
              policy: FailurePolicy | None = None) -> Outcome:
    """The root's first model call answers ``first``; then the user writes again, to show
    the session is still deliverable."""
    holder: list[Outcome] = []

    async def main() -> None:
        model = Once(first)
        agents = {"root": Agent(agent("root", {"child": "allow"}), model),
                  "kid": Agent(agent("kid", {"parent": "allow"}), Once(ModelReply("kid")))}
        rt = Runtime(store, CountingIds(), agents, failure_policy=policy)
        await rt.start()
        root = await rt.create_root("root")
        kid = await rt.writer(rt.engine.delegate, root.session_id, rt.agent("kid").spec, "w")
        rt.poke(kid.session_id)
        if isinstance(first, ModelReply):
            model.first = aim(first, kid.reference)
        await rt.quiesce(timeout=QUIET)
        before = len(list(rt.engine.feed()))
        await rt.accept(root.session_id, "go")
        await rt.quiesce(timeout=QUIET)  # a TimeoutError here is a hang
        again = await rt.accept(root.session_id, "still there?")
        await rt.quiesce(timeout=QUIET)
        holder.append(Outcome(rt, root, model, before, again))
        await rt.shutdown()

    asyncio.run(main())
    return holder[0]


def assert_sound(outcome: Outcome, surface: str) -> None:
    """No crash; no incident but a model that failed with a typed ``ModelError`` (the run
    gives up and the session waits for input); the session still deliverable; every tool
    call answered with a result or a registered code; an all-refused reply changed nothing."""
    rt = outcome.rt
    assert rt.crashes == [], rt.crashes
    unexpected = [i for i in rt.incidents if not isinstance(i.error, ModelError)]
    assert unexpected == [], [(i.reason, repr(i.error)) for i in unexpected]
    TALLY[surface]["model errors (typed)"] += len(rt.incidents) - len(unexpected)
    # Still deliverable: the last user message was consumed by a later run that finished.
    assert rt.engine.message(outcome.again).state == MessageState.CONSUMED
    assert rt.engine.session(outcome.root.session_id).state == SessionState.FINISHED
    results = [m for m in outcome.model.seen[1] if m["role"] == "tool"] \
        if len(outcome.model.seen) > 1 else []
    refused = 0
    for result in results:
        answer = json.loads(result["content"])
        if isinstance(answer, dict) and "error" in answer:
            assert answer["error"] in CODES, answer
            refused += 1
            TALLY[surface][f"tool result {answer['error']}"] += 1
        else:
            TALLY[surface]["tool result ok"] += 1
    if results and refused == len(results):
        # Every call refused: no session, message or approval came of them.
        made = [e for _, e in list(rt.engine.feed())[outcome.before:]
                if e.kind in (EventKind.SESSION_CREATED, EventKind.APPROVAL_REQUESTED)
                or (e.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED
                    and e.data.get("owner") == Owner.AGENT.value)]
        assert made == [], made
    TALLY[surface]["replies"] += 1
