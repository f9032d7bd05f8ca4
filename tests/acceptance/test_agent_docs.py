"""Agent docs from files, merged over the built-ins, and the tool surface they imply: no
message rules, no send_message; ``steer_subagent`` is an ordinary unknown tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.conftest import (
    Brain,
    Messages,
    call,
    open_store,
    reply,
    results,
    run,
    runtime,
    send,
    turns,
)
from treemail.adapters.runtime.agent_docs import agent_specs, build_agents, load_agent_docs
from treemail.adapters.runtime.llm import Model, ModelReply
from treemail.core.agents import BUILTIN_AGENTS
from treemail.core.errors import AgentDocError, UnknownTool
from treemail.core.permissions import Action
from treemail.core.prompts import system_prompt

LEAD_DOC = """---
name: lead
description: Plans and delegates
model: scripted
permissions:
  message:
    child: allow
---
You lead.
"""


def _docs(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / f"{name}.md").write_text(text, encoding="utf-8")
    return folder


def test_agent_docs_load_over_the_builtins_and_errors_name_file_and_field(
    tmp_path: Path,
) -> None:
    docs = load_agent_docs(_docs(tmp_path, lead=LEAD_DOC))
    specs = agent_specs(docs)
    assert set(specs) == {"lead", *BUILTIN_AGENTS}
    assert specs["lead"].rules.decide("child") is Action.ALLOW
    assert not specs["default"].rules.visible and not specs["explore"].rules.visible
    assert docs["lead"].prompt == "You lead." and docs["lead"].model == "scripted"

    bad = _docs(tmp_path / "bad", broken=LEAD_DOC.replace("child: allow", "child: maybe"))
    with pytest.raises(AgentDocError) as caught:
        load_agent_docs(bad)
    assert str(bad / "broken.md") in caught.value.message
    assert caught.value.details["field"] == "permissions.message.child"

    twice = _docs(tmp_path / "twice", a=LEAD_DOC, b=LEAD_DOC)
    with pytest.raises(AgentDocError, match="already defined by") as clash:
        load_agent_docs(twice)
    assert clash.value.details["field"] == "name"
    with pytest.raises(AgentDocError, match="does not exist"):
        load_agent_docs(tmp_path / "nowhere")


def test_tool_visibility_follows_the_rules_and_steer_subagent_is_unknown(
    tmp_path: Path,
) -> None:
    def plain(messages: Messages) -> ModelReply:
        if turns(messages) == 0:  # tries the removed tool, and the hidden one
            return reply(call("steer_subagent", to="x", body="hi"), send("x", "hi"))
        return ModelReply(text="done")

    brains = {"default": Brain(plain), "lead": Brain(lambda m: ModelReply(text="done"))}

    def model_for(name: str, configured: str | None) -> Model:
        return brains.get(name) or Brain(lambda m: ModelReply(text="unused"))

    agents = build_agents(load_agent_docs(_docs(tmp_path, lead=LEAD_DOC)), model_for)
    assert agents["lead"].prompt == "You lead."

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, agents)
        await rt.start()
        for name in ("default", "lead"):
            root = await rt.create_root(name)
            await rt.accept(root.session_id, "go")
        await rt.quiesce()
        delegation = ["delegate_subagent", "get_subagent_result", "cancel_subagent"]
        assert brains["default"].tools_offered(0) == delegation
        assert brains["lead"].tools_offered(0) == [*delegation, "send_message"]
        # The doc's body, then (it may send) the messaging section with its own handle; an
        # agent that may not send is shown its body alone (tests/unit/test_system_prompt.py).
        lead = [s for s in await rt.writer.quiet(rt.engine.sessions) if s.agent.name == "lead"]
        assert brains["lead"].requests[0][0][0] == {"role": "system", "content": system_prompt(
            "You lead.", None, lead[0].reference, can_send=True)}
        removed, hidden = results(brains["default"].requests[1][0])
        assert removed["error"] == hidden["error"] == UnknownTool.code
        assert 'send_message(to=<handle>, body=..., mode="steer")' in removed["message"]
        await rt.shutdown()
        store.close()

    run(main)
