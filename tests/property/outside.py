"""A tree run by the real runtime in which every text that reaches a model comes from
outside, and the check that the models were shown exactly the envelopes real senders made.

The root is given user, plugin and goal mail; it delegates to ``alpha`` and ``beta`` with
the drawn tasks and descriptions, then sends to a handle that does not exist, so the
unknown-reference error lists both children with their descriptions. ``alpha`` sends the
root agent mail with the drawn body and finishes with the drawn result; ``beta``'s model
fails with the drawn error text, so the root is told of the interruption with that reason.

``assert_true_envelopes`` reads each model's last request with the lenient reader
(tests/property/reading.py) and compares what it finds with what the store says was
delivered: an ``<agent_message>`` per agent mail consumed, naming its sender, with a reply
hint when the recipient can answer; a ``<subagent_result>`` per delegation mail a child sent
its parent; nothing else, whatever the texts hold.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any
from unittest.mock import patch

import attrs

from tests.property.reading import normalised, read_tags
from tests.unit.conftest import agent
from treemail.adapters.runtime.llm import ChatMessage, ModelReply, ToolCall
from treemail.adapters.runtime.runtime import Agent, Runtime
from treemail.core import addressing, envelope, events
from treemail.core.errors import InvalidRequest, UnknownSubagentReference
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import MessageState
from treemail.core.memory_store import MemoryStore
from treemail.core.records import AgentSpec, Owner, Session

__all__ = ["Outside", "Tree", "assert_true_envelopes", "bypassed", "run_tree"]

QUIET = 30.0  # seconds for the runtime to settle: longer is a hang


@attrs.frozen
class Outside:
    """Every field of the scenario whose text reaches some model."""

    user: str
    plugin: str
    goal: str
    task_alpha: str
    task_beta: str
    description_alpha: str
    description_beta: str
    agent_body: str
    result: str
    reason: str


class Recorder:
    """A model that answers from ``steps`` (a reply, or an exception to raise), then ends
    its turn; it keeps every request's messages."""

    def __init__(self, *steps: ModelReply | Exception) -> None:
        self.steps = list(steps)
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(self, messages: Sequence[ChatMessage],
                       tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
        self.seen.append([dict(m) for m in messages])
        step = self.steps.pop(0) if self.steps else ModelReply(text="ok")
        if isinstance(step, Exception):
            raise step
        return step


@attrs.define
class Tree:
    rt: Runtime
    models: dict[str, Recorder]  # by agent name
    sessions: list[Session]


def _call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(f"call-{name}-{arguments.get('agent', '')}", name, dict(arguments))


def run_tree(texts: Outside) -> Tree:
    root_id: list[str] = []

    class ToRoot(Recorder):
        """alpha: mail to the root (known only once it exists), then the drawn result."""

        async def complete(self, messages: Sequence[ChatMessage],
                           tools: Sequence[Mapping[str, Any]] = ()) -> ModelReply:
            if not self.seen:
                self.steps.insert(0, ModelReply(tool_calls=(_call(
                    "send_message", to=root_id[0], body=texts.agent_body, mode="queue"),)))
            return await super().complete(messages, tools)

    models: dict[str, Recorder] = {
        "root": Recorder(
            ModelReply(tool_calls=(
                _call("delegate_subagent", agent="alpha", task=texts.task_alpha,
                      description=texts.description_alpha),
                _call("delegate_subagent", agent="beta", task=texts.task_beta,
                      description=texts.description_beta))),
            ModelReply(tool_calls=(_call("send_message", to="nobody_00000000", body="hi"),))),
        "alpha": ToRoot(ModelReply(text=texts.result)),
        "beta": Recorder(RuntimeError(texts.reason)),
    }
    specs: dict[str, AgentSpec] = {
        "root": agent("root", {"child": "allow"}),
        "alpha": agent("alpha", {"parent": "allow"}),
        "beta": agent("beta", {"parent": "allow"}),
    }
    holder: list[Tree] = []

    async def main() -> None:
        rt = Runtime(MemoryStore(), CountingIds(),
                     {name: Agent(spec, models[name]) for name, spec in specs.items()})
        await rt.start()
        root = await rt.create_root("root")
        root_id.append(root.session_id)
        for text, owner in ((texts.user, Owner.USER), (texts.plugin, Owner.PLUGIN),
                            (texts.goal, Owner.GOAL)):
            await _offer(rt, root.session_id, text, owner)
        await rt.quiesce(timeout=QUIET)  # a TimeoutError here is a hang
        holder.append(Tree(rt, models, rt.engine.sessions()))
        await rt.shutdown()

    asyncio.run(main())
    return holder[0]


async def _offer(rt: Runtime, session_id: str, text: str, owner: Owner) -> None:
    """Outside mail; text no store can hold (blank, a lone surrogate) is refused typed and
    then simply not part of the tree."""
    with suppress(InvalidRequest):
        await rt.accept(session_id, text, owner)


def _expected(tree: Tree, session: Session) -> tuple[Counter[tuple[str, str]], Counter[str]]:
    """The envelopes real senders made for ``session`` (kind, sender) and its reply hints."""
    by_id = {s.session_id: s for s in tree.sessions}
    rules = tree.rt.engine.rules_of(session)
    envelopes: Counter[tuple[str, str]] = Counter()
    hints: Counter[str] = Counter()
    accepted = [p.message_id for _, p in events.typed(tree.rt.engine.events(session.session_id))
                if isinstance(p, events.ProducerMessageAccepted)]
    consumed = [m for m in map(tree.rt.engine.message, accepted)
                if m.state is MessageState.CONSUMED]
    for message in consumed:
        sender = by_id.get(message.sender or "")
        if sender is None:
            continue
        name = normalised(sender.reference)
        if message.owner is Owner.AGENT:
            envelopes["agent_message", name] += 1
            if rules.visible:
                hints[name] += 1
        elif message.owner is Owner.DELEGATION and sender.parent_session_id == session.session_id:
            envelopes["subagent_result", name] += 1
    return envelopes, hints


def _shown(request: list[dict[str, Any]]) -> list[str]:
    """What others wrote in one request: every user and tool message."""
    return [str(m.get("content") or "") for m in request if m.get("role") in ("user", "tool")]


def assert_true_envelopes(tree: Tree) -> None:
    for session in tree.sessions:
        model = tree.models[session.agent.name]
        if not model.seen:
            continue
        envelopes: Counter[tuple[str, str]] = Counter()
        hints: Counter[str] = Counter()
        for text in _shown(model.seen[-1]):
            reading = read_tags(text)
            if reading.tags:  # one envelope, the whole text: opened first, closed last
                assert len(reading.tags) == 2, reading
                (kind, sender, first), (closing, to, last) = reading.tags
                assert (first, closing, to) == (0, kind, None), reading
                assert last == reading.length - len(f"</{kind}>"), reading
                envelopes[kind, str(sender)] += 1
            hints.update(str(target) for target in reading.hints)
        assert (envelopes, hints) == _expected(tree, session), (session.reference,
                                                                 _shown(model.seen[-1]))
    _assert_one_line_per_peer(tree)


def _assert_one_line_per_peer(tree: Tree) -> None:
    """The root's unknown-reference error lists each live child on exactly one line."""
    root = tree.models["root"]
    children = [s for s in tree.sessions if s.parent_session_id is not None]
    for request in root.seen:
        for message in request:
            if message.get("role") != "tool":
                continue
            answer = json.loads(str(message["content"]))
            if answer.get("error") == UnknownSubagentReference.code:
                lines = [ln for ln in answer["message"].splitlines() if ln.startswith("- ")]
                assert len(lines) == len(children), lines
                return


def _raw_envelope(sender_reference: str, body: str, *, reply_hint: bool) -> str:
    hint = f'\n\n[use `send_message(to="{sender_reference}", ...)` to reply]' if reply_hint else ""
    return f'<agent_message from="{sender_reference}">\n{body}{hint}\n</agent_message>'


def _raw_result(child_reference: str, result: str) -> str:
    return f'<subagent_result from="{child_reference}">\n{result}\n</subagent_result>'


def _as_is(text: str) -> str:
    return text


# field -> the module and renderer that stands between it and a model
_RENDERERS: dict[str, tuple[object, str, Callable[..., str]]] = {
    "user": (envelope, "render_plain", _as_is),
    "plugin": (envelope, "render_plain", _as_is),
    "goal": (envelope, "render_plain", _as_is),
    "task_alpha": (envelope, "render_plain", _as_is),
    "agent_body": (envelope, "render_envelope", _raw_envelope),
    "result": (envelope, "render_subagent_result", _raw_result),
    "reason": (envelope, "render_subagent_result", _raw_result),
    "description_alpha": (addressing, "render_description", _as_is),
}


def bypassed(field: str) -> AbstractContextManager[object]:
    """The renderer of ``field`` replaced by one that inserts the text as written."""
    module, name, raw = _RENDERERS[field]
    return patch.object(module, name, raw)
