"""A session's system prompt: the doc's body, and for an agent that may send, a messaging
section with its own handle, the envelope and how to reply, naming no other session (the
contract has no discovery). A doc may replace the section or drop it."""

from __future__ import annotations

import asyncio
import re

import pytest

from treemail.adapters.runtime.agent_docs import build_agents
from treemail.adapters.runtime.llm import ModelReply, ScriptedModel
from treemail.adapters.runtime.runtime import Runtime
from treemail.core.agents import parse_agent_doc
from treemail.core.errors import AgentDocError
from treemail.core.ids import CountingIds
from treemail.core.prompts import MESSAGING_PROMPT, system_prompt
from treemail.core.records import Session
from treemail.core.store import Store

SENDER = ("---\nname: worker\ndescription: works\npermissions:\n  message:\n    parent: allow\n"
          "    sibling: allow\n    child: allow\n{extra}---\nDo the work you are given.\n")
SILENT = "---\nname: quiet\ndescription: keeps quiet\n---\nWork alone.\n"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _prompts(store: Store, extra: str = "") -> tuple[dict[str, str], list[Session]]:
    """Run a tree (a root with two worker children and a quiet one) on models that record
    what they are shown; each session's system prompt by its id, and the sessions."""
    docs = {d.spec.name: d for d in (parse_agent_doc(SENDER.format(extra=extra)),
                                     parse_agent_doc(SILENT))}
    models: dict[str, ScriptedModel] = {}

    def model_for(name: str, _: str | None) -> ScriptedModel:
        return models.setdefault(name, ScriptedModel(lambda messages: ModelReply(text="done")))

    async def go() -> tuple[dict[str, str], list[Session]]:
        rt = Runtime(store, CountingIds(), build_agents(docs, model_for))
        await rt.start()
        root = await rt.create_root("worker")
        kids = [await rt.writer(rt.engine.delegate, root.session_id, rt.agent(name).spec,
                                f"task {i}") for i, name in enumerate(("worker", "worker",
                                                                       "quiet"))]
        for kid in kids:
            rt.poke(kid.session_id)
        await rt.accept(root.session_id, "lead them")
        await rt.quiesce(timeout=30)
        await rt.shutdown()
        sessions = [root, *kids]
        shown: dict[str, str] = {}
        for name in ("worker", "quiet"):
            for messages, _tools in models[name].requests:
                first = messages[0]
                assert first["role"] == "system"
                # Which session asked: the one whose task or input is in this request.
                sid = _asker(sessions, [str(m.get("content")) for m in messages])
                shown.setdefault(sid, str(first["content"]))
        return shown, sessions

    async def bounded() -> tuple[dict[str, str], list[Session]]:
        async with asyncio.timeout(60):
            return await go()

    return asyncio.run(bounded())


def _asker(sessions: list[Session], texts: list[str]) -> str:
    inputs = {"lead them": sessions[0]} | {f"task {i}": s for i, s in enumerate(sessions[1:])}
    return next(inputs[t].session_id for t in texts if t in inputs)


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_a_sender_is_told_its_handle_and_the_envelope_and_no_one_else(store: Store) -> None:
    shown, sessions = _prompts(store)
    root, first, second, quiet = sessions
    assert set(shown) == {s.session_id for s in sessions}
    for me in (root, first, second):
        prompt = shown[me.session_id]
        assert prompt == system_prompt("Do the work you are given.", None, str(me.handle),
                                       can_send=True)
        assert prompt.startswith("Do the work you are given.\n\n## Messaging\n")
        assert f"Your handle is {me.handle}:" in prompt and "<agent_message" in prompt
        assert "send_message" in prompt
        # No discovery: no other session's handle or id, and no id at all.
        for other in sessions:
            if other is not me:
                assert str(other.handle) not in prompt and other.session_id not in prompt
        assert _UUID.search(prompt) is None
    # An agent that may not send is shown its doc's body alone: no handle, no envelope talk.
    assert shown[quiet.session_id] == "Work alone."


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_a_doc_replaces_the_section(store: Store) -> None:
    own = 'messaging_prompt: "Sign your mail as {handle}."\n'
    shown, sessions = _prompts(store, own)
    assert shown[sessions[1].session_id] == (
        f"Do the work you are given.\n\nSign your mail as {sessions[1].handle}.")


@pytest.mark.parametrize("store", ["memory"], indirect=True)
def test_a_doc_drops_the_section(store: Store) -> None:
    dropped, _ = _prompts(store, "messaging_prompt: false\n")
    assert set(dropped.values()) == {"Do the work you are given.", "Work alone."}


@pytest.mark.parametrize("value", ["true", '""', "[a]", "3"])
def test_a_bad_messaging_prompt_names_the_field(value: str) -> None:
    with pytest.raises(AgentDocError, match="messaging_prompt must be a non-empty string"
                       ) as bad:
        parse_agent_doc(f"---\nname: a\nmessaging_prompt: {value}\n---\n")
    assert bad.value.details["field"] == "messaging_prompt"


def test_the_default_section_names_no_session_and_no_directive() -> None:
    assert _UUID.search(MESSAGING_PROMPT) is None and MESSAGING_PROMPT.count("{handle}") == 1
    # The scripted model reads "delegate AGENT: TASK" and "steer AGENT: TEXT" lines from the
    # system prompt: the section must not read as one.
    from treemail.adapters.daemon.scripted import Plan

    assert Plan.of(MESSAGING_PROMPT) == Plan()
