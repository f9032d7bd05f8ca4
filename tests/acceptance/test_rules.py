"""Sends under permission rules in one live tree: parent, child, sibling and ``*`` labels
come from origin metadata, and only the rules decide."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.conftest import (
    Brain,
    Messages,
    accepted_bodies,
    agent,
    delegate,
    open_store,
    reply,
    results,
    run,
    runtime,
    send,
    turns,
)
from treemail.adapters.runtime.llm import ModelReply
from treemail.core.envelope import render_envelope
from treemail.core.errors import PermissionDenied

# r is the root; x and y its children (siblings); g is x's child, so r is g's grandparent
# ("*") and y its uncle ("*").
RULES = {
    "r": {"child": "allow"},
    "x": {"sibling": "allow", "parent": "allow"},
    "y": {"sibling": "allow"},
    "g": {"*": "allow", "parent": "deny"},
}
# sender -> [(recipient, expected tool error code or None)]
PLAN: dict[str, list[tuple[str, str | None]]] = {
    "r": [("x", None), ("g", PermissionDenied.code)],
    "x": [("y", None), ("r", None)],
    "y": [("r", PermissionDenied.code), ("x", None)],
    "g": [("x", PermissionDenied.code), ("r", None), ("y", None)],
}


def test_sends_between_tree_peers_follow_the_relationship_labels(tmp_path: Path) -> None:
    ids: dict[str, str] = {}

    def brain(name: str) -> Brain:
        def respond(messages: Messages) -> ModelReply:
            if turns(messages) == 0:  # the task (or first mail): send as planned
                return reply(*(send(ids[to], f"{name} to {to}") for to, _ in PLAN[name]))
            return ModelReply(text="ok")

        return Brain(respond)

    brains = {name: brain(name) for name in RULES}

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {n: agent(n, RULES[n], brains[n]) for n in RULES})
        await rt.start()
        r = await rt.create_root("r")
        x = await delegate(rt, r, "x", "task x", start=False)
        y = await delegate(rt, r, "y", "task y", start=False)
        g = await delegate(rt, x, "g", "task g", start=False)
        sessions = {"r": r, "x": x, "y": y, "g": g}
        ids.update({n: s.session_id for n, s in sessions.items()})
        for session in (x, y, g):
            rt.poke(session.session_id)
        await rt.accept(r.session_id, "start")
        await rt.quiesce()

        for name, plan in PLAN.items():
            first_results = results(brains[name].requests[1][0])
            codes = [result.get("error") for result in first_results]
            assert codes == [code for _, code in plan], name
        for name, session in sessions.items():
            expected = sorted(f"{s} to {name}" for s, plan in PLAN.items()
                              for to, code in plan if to == name and code is None)
            assert sorted(accepted_bodies(rt, session.session_id)) == expected
            for body in expected:
                sender = sessions[body.split()[0]]
                hint = bool(RULES[name])  # every agent here has rules, so sees the tool
                envelope = render_envelope(sender.reference, body, reply_hint=hint)
                assert brains[name].seen(envelope), (name, body)
        await rt.shutdown()
        store.close()

    run(main)
