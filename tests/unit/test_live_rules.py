"""Permissions come from the agent's current doc, by agent name, at each visibility check and
each send: rules are no longer frozen into a session when it is created."""

from __future__ import annotations

import pytest

from treemail.core.engine import Engine
from treemail.core.errors import ApprovalRequired, PermissionDenied, TreemailError
from treemail.core.ids import CountingIds
from treemail.core.lifecycle import SessionState
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Session, ToolContext
from treemail.core.store import Store


def _spec(name: str, rules: dict[str, str]) -> AgentSpec:
    return AgentSpec(name, rules=Rules.of(rules))


class Docs:
    """The agent docs as the loader would find them now; edited between lives."""

    def __init__(self) -> None:
        self.specs = {"boss": _spec("boss", {"*": "allow"}),
                      "worker": _spec("worker", {"parent": "allow"})}

    def __call__(self, name: str) -> AgentSpec | None:
        return self.specs.get(name)


def _tree(store: Store, docs: Docs) -> tuple[Engine, Session, Session]:
    engine = Engine(store, CountingIds(), agents=docs)
    root = engine.create_root(docs.specs["boss"])
    kid = engine.delegate(root.session_id, docs.specs["worker"], "task")
    return engine, root, kid


def _send(engine: Engine, kid: Session, to: Session, call: str) -> str:
    session = engine.session(kid.session_id)
    if session.state is SessionState.RUNNING and session.run_id is not None:
        run = session.run_id
    else:
        run = engine.start_run(kid.session_id).run_id
    try:
        engine.send_message(ToolContext(kid.session_id, run, call),
                            {"to": to.session_id, "body": "hi"})
    except TreemailError as refused:
        return refused.code
    return "sent"


def test_a_doc_changed_to_deny_reaches_an_old_session_after_restart(store: Store) -> None:
    docs = Docs()
    engine, root, kid = _tree(store, docs)
    assert engine.tool_visible(kid.session_id)
    assert _send(engine, kid, root, "c1") == "sent"
    docs.specs["worker"] = _spec("worker", {"*": "deny"})
    restarted = Engine(store, CountingIds(), agents=docs)
    restarted.recover()
    assert not restarted.tool_visible(kid.session_id)
    assert _send(restarted, kid, root, "c2") == PermissionDenied.code


def test_an_agent_no_longer_defined_falls_back_to_deny(store: Store) -> None:
    docs = Docs()
    engine, root, kid = _tree(store, docs)
    del docs.specs["worker"]
    assert not engine.tool_visible(kid.session_id)
    assert _send(engine, kid, root, "c1") == PermissionDenied.code


@pytest.mark.parametrize(("now", "expected"), [("ask", "sent"), ("deny", PermissionDenied.code)])
def test_a_grant_is_checked_against_the_live_rule(store: Store, now: str, expected: str) -> None:
    docs = Docs()
    docs.specs["worker"] = _spec("worker", {"parent": "ask"})
    engine, root, kid = _tree(store, docs)
    assert _send(engine, kid, root, "c1") == ApprovalRequired.code
    engine.grant("session", kid.session_id, "parent")
    docs.specs["worker"] = _spec("worker", {"parent": now})
    assert _send(engine, kid, root, "c2") == expected


def test_without_a_catalogue_the_stored_rules_apply(store: Store) -> None:
    engine = Engine(store, CountingIds())
    root = engine.create_root(_spec("boss", {}))
    kid = engine.delegate(root.session_id, _spec("worker", {"parent": "allow"}), "task")
    assert engine.tool_visible(kid.session_id) and not engine.tool_visible(root.session_id)


def test_the_reference_model_reads_rules_live_too() -> None:
    from treemail.core.config import MessagingConfig
    from treemail.models.reference import Reference

    docs = Docs()
    model = Reference(MessagingConfig(), agents=docs)
    root = model.create_root(docs.specs["boss"])
    kid = model.delegate(root, docs.specs["worker"], "task")
    assert model.tool_visible(kid)
    docs.specs["worker"] = _spec("worker", {"*": "deny"})
    assert not model.tool_visible(kid)
    run = model.start_run(kid)
    with pytest.raises(TreemailError) as refused:
        model.send_message(ToolContext(kid, run, "c1"), {"to": root, "body": "hi"})
    assert refused.value.code == PermissionDenied.code
