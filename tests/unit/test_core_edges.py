"""Edges of the core that the mutation run (``just mutate``, docs/mutation.md) found unpinned.

Each test here kills mutants that survived the rest of tests/unit: agent-doc parsing, the exact
refusal texts a model or a user reads, and the engine paths no other unit test walked.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml

from tests.unit.conftest import World, arguments
from treemail.core.agents import parse_agent_doc
from treemail.core.config import MessagingConfig
from treemail.core.errors import (
    AgentDocError,
    ApprovalRequired,
    ConfigError,
    ConfigUnknownKey,
    IllegalTransition,
    InvalidRequest,
    NotTreePeer,
    PermissionDenied,
    UnknownApproval,
    UnknownSession,
    UnknownSubagentReference,
    UnknownTarget,
    UnknownTool,
)
from treemail.core.events import EventKind, RecordedResult, Reply
from treemail.core.lifecycle import (
    SESSION,
    ApprovalState,
    Lifecycle,
    MessageLifecycle,
    MessageState,
    MessageTrigger,
    RequestState,
    RunState,
    SessionLifecycle,
    SessionState,
    SessionTrigger,
)
from treemail.core.permissions import Action, Rules
from treemail.core.records import GrantScope, Owner, Session, ToolContext
from treemail.core.sending import grant_counter, send
from treemail.core.tools import (
    TOOL_NAMES,
    function_parameters,
    json_schema,
    lookup_tool,
    tool_definitions,
)

# -- agent docs --------------------------------------------------------------------------------

DOC = """\
---
name: code_reviewer-2
description: "  Reviews code  "
model: " scripted "
permissions:
  message:
    parent: allow
    sibling: ask
  delegate:
    child: allow
---

  The system prompt.
---
  A rule inside the prompt stays in the prompt.

"""


def test_agent_doc_reads_every_field() -> None:
    doc = parse_agent_doc(DOC, source="agents/review.md")
    assert doc.spec.name == "code_reviewer-2"
    assert doc.spec.description == "Reviews code"
    assert doc.model == "scripted"
    assert doc.source == "agents/review.md"
    assert doc.prompt == (
        "The system prompt.\n---\n  A rule inside the prompt stays in the prompt."
    )
    assert doc.spec.rules == Rules.of({"parent": "allow", "sibling": "ask"})
    assert doc.spec.rules.decide("sibling") is Action.ASK


def test_agent_doc_fences_may_carry_spaces_and_optional_fields_default() -> None:
    doc = parse_agent_doc("  ---  \nname: ' x '\n---   \nbody\n")
    assert doc.spec.name == "x"
    assert doc.spec.description == ""
    assert doc.model is None
    assert doc.spec.rules == Rules()
    assert doc.prompt == "body"
    assert doc.source == "<agent doc>"


def test_agent_doc_without_message_rules_has_none() -> None:
    doc = parse_agent_doc("---\nname: x\npermissions:\n  delegate: {}\n---\n")
    assert doc.spec.rules == Rules()
    assert doc.prompt == ""


def _doc_error(text: str) -> AgentDocError:
    with pytest.raises(AgentDocError) as caught:
        parse_agent_doc(text, source="a.md")
    error = caught.value
    assert error.code == AgentDocError.code
    assert error.details["source"] == "a.md"
    return error


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("", "frontmatter", "a.md: frontmatter must open the file with a '---' line"),
        ("name: x\n---\n", "frontmatter", "a.md: frontmatter must open the file with a '---' line"),
        ("---\nname: x\n", "frontmatter", "a.md: frontmatter has no closing '---' line"),
        ("---\n---\n", "frontmatter", "a.md: frontmatter must be a mapping of fields"),
        ("---\n- name\n---\n", "frontmatter", "a.md: frontmatter must be a mapping of fields"),
        (
            "---\nname: x\nzeta: 1\ncolour: red\n---\n",
            "colour",
            "a.md: colour is not a known field; expected description, messaging_prompt, model, "
            "name, permissions, receipts",
        ),
        ("---\ndescription: d\n---\n", "name", "a.md: name must be a non-empty string"),
        ("---\nname: 7\n---\n", "name", "a.md: name must be a non-empty string"),
        ("---\nname: '  '\n---\n", "name", "a.md: name must be a non-empty string"),
        ("---\nname: a.b\n---\n", "name", "a.md: name must be letters, digits, '-' or '_'"),
        ("---\nname: a b\n---\n", "name", "a.md: name must be letters, digits, '-' or '_'"),
        ("---\nname: '-'\n---\n", "name", "a.md: name must be letters, digits, '-' or '_'"),
        ("---\nname: _\n---\n", "name", "a.md: name must be letters, digits, '-' or '_'"),
        ("---\nname: x\ndescription: ''\n---\n", "description",
         "a.md: description must be a non-empty string"),
        ("---\nname: x\nmodel: [m]\n---\n", "model", "a.md: model must be a non-empty string"),
        ("---\nname: x\npermissions: allow\n---\n", "permissions",
         "a.md: permissions must be a mapping of action to rules"),
        ("---\nname: x\npermissions:\n  write: {}\n  tell: {}\n---\n", "permissions.tell",
         "a.md: permissions.tell is not a known action"),
        ("---\nname: x\npermissions:\n  message: allow\n---\n", "permissions.message",
         "a.md: permissions.message must be a mapping of label to allow|ask|deny"),
        ("---\nname: x\npermissions:\n  message:\n    child: yes\n---\n",
         "permissions.message.child",
         "a.md: permissions.message.child: action must be allow, ask or deny, got True"),
    ],
)
def test_agent_doc_refusals_name_the_field(text: str, field: str, message: str) -> None:
    error = _doc_error(text)
    assert error.details["field"] == field
    assert error.message == message
    assert str(error) == f"agent_doc:invalid: {message}"


def test_agent_doc_invalid_yaml_keeps_the_parser_error() -> None:
    error = _doc_error("---\nname: [x\n---\n")
    assert error.details["field"] == "frontmatter"
    assert error.message.startswith("a.md: frontmatter is not valid YAML: ")
    assert isinstance(error.__cause__, yaml.YAMLError)
    assert str(error.__cause__) in error.message


def test_agent_doc_prompt_keeps_everything_after_the_first_closing_fence() -> None:
    text = textwrap.dedent("""\
        ---
        name: x
        ---
        one
        ---
        two
        """)
    assert parse_agent_doc(text).prompt == "one\n---\ntwo"


# -- configuration -----------------------------------------------------------------------------


def test_config_unknown_keys_name_the_first_in_order_with_the_valid_ones() -> None:
    with pytest.raises(ConfigUnknownKey) as caught:
        MessagingConfig.from_mapping({"zz": 1, "aa": 2, "max_hops": 3})
    assert caught.value.code == ConfigUnknownKey.code
    assert caught.value.message == (
        "unknown key `aa` in [messaging] (known: `enabled`, `max_hops`, `max_body_bytes`, "
        "`max_pending_per_session`, `max_inflight_per_pair`, `message_ttl_seconds`; every key is "
        "documented in spec/config.md)"
    )
    assert caught.value.details == {"table": "messaging", "key": "aa", "suggestion": None}


def test_config_unknown_key_suggests_the_nearest() -> None:
    with pytest.raises(ConfigUnknownKey, match="did you mean `max_hops`"):
        MessagingConfig.from_mapping({"max_hop": 3})


def test_config_from_toml_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        MessagingConfig.from_toml("messaging = [")
    assert caught.value.message.startswith("config is not valid TOML: ")
    assert caught.value.__cause__ is not None
    with pytest.raises(ConfigError) as caught:
        MessagingConfig.from_toml("messaging = 3")
    assert caught.value.message == "[messaging] must be a table"
    assert MessagingConfig.from_toml("[other]\nx = 1\n") == MessagingConfig()


def test_rules_parse_names_its_default_source() -> None:
    with pytest.raises(AgentDocError) as caught:
        Rules.parse({"child": "maybe"})
    assert caught.value.details["source"] == "<rules>"
    assert caught.value.message.startswith("<rules>: permissions.message.child: ")


# -- lifecycles --------------------------------------------------------------------------------


def test_lifecycle_tables_derived_at_call_time() -> None:
    # MESSAGE and SESSION are derived at import; deriving again must give exactly these tables.
    M, S = MessageState, SessionState
    MT, ST = MessageTrigger, SessionTrigger
    message = Lifecycle.derive(MessageLifecycle, MessageState, MessageTrigger)
    assert message == Lifecycle(
        name="MessageLifecycle",
        initial=M.ACCEPTED,
        states=(M.ACCEPTED, M.ADMITTED, M.CLAIMED, M.RELEASED, M.CONSUMED, M.DISCARDED),
        final=frozenset({M.CONSUMED, M.DISCARDED}),
        triggers=(MT.ADMIT, MT.CLAIM, MT.RELEASE, MT.CONSUME, MT.DISCARD, MT.CANCEL, MT.EXPIRE),
        meanings=message.meanings,
        transitions={
            (M.ACCEPTED, MT.ADMIT): M.ADMITTED,
            (M.ACCEPTED, MT.DISCARD): M.DISCARDED,
            (M.ADMITTED, MT.CLAIM): M.CLAIMED,
            (M.ADMITTED, MT.DISCARD): M.DISCARDED,
            (M.CLAIMED, MT.RELEASE): M.RELEASED,
            (M.CLAIMED, MT.CONSUME): M.CONSUMED,
            (M.RELEASED, MT.CLAIM): M.CLAIMED,
            (M.RELEASED, MT.DISCARD): M.DISCARDED,
            **{(state, trigger): M.DISCARDED for state in (M.ACCEPTED, M.ADMITTED, M.RELEASED)
               for trigger in (MT.CANCEL, MT.EXPIRE)},
        },
    )
    session = Lifecycle.derive(SessionLifecycle, SessionState, SessionTrigger)
    assert session == Lifecycle(
        name="SessionLifecycle",
        initial=S.IDLE,
        states=(S.IDLE, S.QUEUED, S.RUNNING, S.FINISHED),
        final=frozenset(),
        triggers=(ST.ENQUEUE, ST.START, ST.FINISH, ST.INTERRUPT),
        meanings=session.meanings,
        transitions={
            (S.IDLE, ST.ENQUEUE): S.QUEUED,
            (S.QUEUED, ST.START): S.RUNNING,
            (S.QUEUED, ST.INTERRUPT): S.IDLE,
            (S.RUNNING, ST.FINISH): S.FINISHED,
            (S.RUNNING, ST.INTERRUPT): S.IDLE,
            (S.FINISHED, ST.ENQUEUE): S.QUEUED,
        },
    )


def test_illegal_transition_message_and_details() -> None:
    allowed = ("commit_request", "abort_request")
    error = IllegalTransition("run r", "finish", "request open", allowed)
    assert error.message == (
        "cannot finish run r in state 'request open'; "
        "from 'request open' only commit_request, abort_request is allowed"
    )
    assert error.details == {"subject": "run r", "event": "finish", "state": "request open",
                             "allowed": ["commit_request", "abort_request"]}
    assert error.allowed == allowed
    nothing = IllegalTransition("session s", "start", str(SessionState.RUNNING), ())
    assert nothing.message == (
        "cannot start session s in state 'running'; from 'running' only no event is allowed"
    )


# -- addressing --------------------------------------------------------------------------------


def test_unknown_session_uuid_message(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    missing = "0000ffff-0000-4000-8000-000000000000"
    with pytest.raises(UnknownSession) as caught:
        world.send(root, missing)
    assert caught.value.message == (
        f"no session has id {missing}; check the id you were given, "
        "or address a peer of your tree by its handle"
    )
    assert caught.value.details == {"session_id": missing}


def test_not_tree_peer_message(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    other = world.root("other")
    with pytest.raises(NotTreePeer) as caught:
        world.send(root, other.session_id)
    assert caught.value.message == (
        f"session {other.session_id} is not in your delegation tree; "
        "you can only message sessions of your own tree"
    )
    assert caught.value.details == {"session_id": other.session_id}


def test_unknown_handle_in_a_lone_tree_says_there_is_no_peer(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    with pytest.raises(UnknownSubagentReference) as caught:
        world.send(root, "ghost_1234")
    assert caught.value.message == (
        "unknown subagent reference 'ghost_1234': it is neither a session id nor the handle of "
        "a live session of your tree. Your tree has no other session to message."
    )
    assert caught.value.details == {"reference": "ghost_1234", "candidates": [], "more": 0}


# -- the event log of a run --------------------------------------------------------------------


def test_a_run_writes_its_transcript_events(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    run = world.activate(kid)
    engine = world.engine
    request = engine.begin_request(kid.session_id, run.run_id)
    [task] = request.deliveries
    engine.commit_request(kid.session_id, run.run_id, request.request_id, Reply(text="done"))
    engine.record_tool_results(kid.session_id, run.run_id, [RecordedResult("c1", "ok")])
    engine.finish_run(kid.session_id, run.run_id)
    ids = {"run_id": run.run_id, "request_id": request.request_id}
    tail = [(e.kind, dict(e.data)) for e in engine.events(kid.session_id)][-6:]
    assert tail == [
        (EventKind.REQUEST_BEGUN, {**ids, "message_ids": [task.message_id]}),
        (EventKind.PRODUCER_MESSAGE_CONSUMED, {
            "message_id": task.message_id, "owner": "delegation", "sender": root.session_id,
            **ids,
        }),
        (EventKind.REQUEST_COMMITTED, ids),
        (EventKind.MODEL_OUTPUT, {**ids, "inputs": [], "text": "done", "tool_calls": []}),
        (EventKind.TOOL_RESULTS, {"run_id": run.run_id,
                         "results": [{"tool_call_id": "c1", "content": "ok"}]}),
        (EventKind.RUN_FINISHED, {"run_id": run.run_id, "run_number": 1, "reason": "completed"}),
    ]
    assert engine.run(run.run_id).status is RunState.FINISHED
    # ``after`` skips what the caller has already read.
    assert engine.events(kid.session_id, after=10) == engine.events(kid.session_id)[10:]
    assert [s.session_id for s in engine.sessions()] == [root.session_id, kid.session_id]


# An interruption that was no model failure records none of a fault's fields.
NO_FAULT = {"status": None, "endpoint": None, "hint": None}


def test_abort_and_cancel_write_their_reasons(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    engine = world.engine
    run = world.activate(kid)
    request = engine.begin_request(kid.session_id, run.run_id)
    engine.abort_request(kid.session_id, run.run_id, request.request_id)
    assert _last(world, kid) == (EventKind.REQUEST_ABORTED, {
        "run_id": run.run_id, "request_id": request.request_id})
    engine.cancel_run(kid.session_id, run.run_id)
    assert _last(world, kid, EventKind.RUN_INTERRUPTED) == {
        "run_id": run.run_id, "run_number": 1, "reason": "cancelled", **NO_FAULT}
    again = world.activate(kid)
    engine.begin_request(kid.session_id, again.run_id)
    engine.cancel_run(kid.session_id, again.run_id, reason="user pressed stop")
    assert _last(world, kid, EventKind.RUN_INTERRUPTED) == {
        "run_id": again.run_id, "run_number": 2, "reason": "user pressed stop", **NO_FAULT}
    assert engine.run(again.run_id).status is RunState.INTERRUPTED


def test_recover_names_the_crash_as_the_reason(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    run = world.activate(kid)
    assert world.restart().recover() == 1
    assert _last(world, kid, EventKind.RUN_INTERRUPTED) == {
        "run_id": run.run_id, "run_number": 1, "reason": "crash found at restart", **NO_FAULT}


def test_record_tool_results_needs_the_running_run(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    queued = world.fresh(kid).run_id
    assert queued is not None
    before = world.snapshot()
    with pytest.raises(UnknownTarget) as caught:
        world.engine.record_tool_results(kid.session_id, queued, [])
    assert caught.value.message == (
        f"run {queued} is not the running run of session {kid.session_id}")
    assert world.snapshot() == before


def test_a_queued_run_has_no_request_boundary(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    queued = world.fresh(kid).run_id
    assert queued is not None
    with pytest.raises(UnknownTarget):
        world.engine.begin_request(kid.session_id, queued)


def test_double_begin_and_finish_with_an_open_request_are_illegal(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    run = world.activate(kid)
    engine = world.engine
    request = engine.begin_request(kid.session_id, run.run_id)
    before = world.snapshot()
    # Both refusals come from RequestLifecycle's table, which lists what is allowed instead.
    for attempt, event in (
        (lambda: engine.begin_request(kid.session_id, run.run_id), "begin_request"),
        (lambda: engine.finish_run(kid.session_id, run.run_id), "end"),
    ):
        with pytest.raises(IllegalTransition) as caught:
            attempt()
        assert caught.value.message == (
            f"cannot {event} run {run.run_id} in state 'request_open'; "
            "from 'request_open' only commit_request, abort_request is allowed"
        )
        assert (caught.value.subject, caught.value.event, caught.value.state) == (
            f"run {run.run_id}", event, RequestState.REQUEST_OPEN)
    assert world.snapshot() == before
    assert engine.run(run.run_id).open_request == request.request_id


def test_start_run_outside_queued_is_illegal(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    with pytest.raises(IllegalTransition) as caught:
        world.engine.start_run(root.session_id)
    assert caught.value.message == (
        f"cannot start session {root.session_id} in state 'idle'; "
        "from 'idle' only enqueue is allowed"
    )
    # The allowed events are the table's, not a hand-kept list.
    assert caught.value.allowed == SESSION.allowed(SessionState.IDLE) == ("enqueue",)
    assert caught.value.details["allowed"] == ["enqueue"]


def test_unknown_targets_say_what_is_missing(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    run = world.activate(kid)
    engine = world.engine
    request = engine.begin_request(kid.session_id, run.run_id)
    with pytest.raises(UnknownTarget) as caught:
        engine.commit_request(kid.session_id, run.run_id, "r-other")
    assert caught.value.message == f"request r-other is not the open request of run {run.run_id}"
    engine.commit_request(kid.session_id, run.run_id, request.request_id)
    with pytest.raises(UnknownTarget) as caught:
        engine.finish_run(root.session_id, run.run_id)
    assert caught.value.message == (
        f"run {run.run_id} is not the current run of {root.session_id}")
    with pytest.raises(UnknownTarget) as caught:
        engine.discard("m-none", "stale")
    assert caught.value.message == "no message m-none"
    with pytest.raises(InvalidRequest) as invalid:
        engine.discard("m-none", "  ")
    assert invalid.value.message == "a discard needs a reason, recorded in the event log"
    with pytest.raises(InvalidRequest) as invalid:
        engine.grant("forever", root.session_id, "child")
    assert invalid.value.message == (
        "grant scope must be once, session or tree, not 'forever'")


def test_discard_unbinds_the_message_from_its_run(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    run = world.activate(kid)
    sent = world.send(root, kid, "steer me", mode="steer")
    world.engine.reconcile(kid.session_id)  # admitted into the running run
    assert world.engine.message(sent.message_id).run_id == run.run_id
    world.engine.discard(sent.message_id, "superseded")
    dropped = world.engine.message(sent.message_id)
    assert (dropped.state, dropped.run_id, dropped.reason) == (
        MessageState.DISCARDED, None, "superseded")
    assert _last(world, kid, EventKind.PRODUCER_MESSAGE_DISCARDED)["run_id"] is None


def test_mail_accepted_but_not_yet_admitted_joins_the_running_run(world: World) -> None:
    # A send to a running recipient leaves its mail accepted, not admitted (only a recipient
    # without a run is reconciled by the send): begin_request admits that steer into its run.
    root = world.root("root", {"*": "allow"})
    kid = world.child(root, "kid", {"*": "allow"})
    run = world.activate(kid)
    world.engine.begin_request(kid.session_id, run.run_id)
    world.engine.commit_request(
        kid.session_id, run.run_id, world.engine.run(run.run_id).open_request or "")
    ctx = world.ctx(root)
    engine = world.engine
    sent = world.store.transact(
        lambda tx: send(tx, engine.config, engine.ids, ctx, arguments(kid, "now", "steer")))
    request = engine.begin_request(kid.session_id, run.run_id)
    assert [d.message_id for d in request.deliveries] == [sent.result.message_id]


def test_the_delegation_notice_comes_from_the_child_and_is_logged(world: World) -> None:
    root = world.root("root", {"child": "allow"})
    kid = world.child(root, "kid")
    run = world.activate(kid)
    assert world.engine.finish_run(kid.session_id, run.run_id, "all done") is True
    [notice] = [m for m in world.engine.pending(root.session_id) if m.owner is Owner.DELEGATION]
    assert notice.sender == kid.session_id
    assert _last(world, kid) == (EventKind.DELEGATION_COMPLETED, {"message_id": notice.message_id})


def test_revert_reaches_every_depth_and_logs_the_branch(world: World) -> None:
    root = world.root("root", {"*": "allow"})
    top = world.child(root, "top", {"*": "allow"})
    mid = world.child(top, "mid", {"*": "allow"})
    low = world.child(mid, "low", {"*": "allow"})
    ghosts = world.engine.revert(top.session_id)
    assert ghosts == [top.session_id, mid.session_id, low.session_id]
    for ghost in (top, mid, low):
        assert world.fresh(ghost).live is False
        assert _last(world, ghost) == (EventKind.SESSION_REVERTED, {"branch": top.session_id})
    assert world.fresh(root).live is True


def _last(world: World, session: Session, kind: str | None = None) -> Any:
    """The session's last event as (kind, data), or the data of its last event of ``kind``."""
    events = world.engine.events(session.session_id)
    if kind is None:
        return events[-1].kind, dict(events[-1].data)
    return dict([e for e in events if e.kind == kind][-1].data)


# -- approvals ---------------------------------------------------------------------------------

ASK = {"sibling": "ask", "parent": "allow"}


def _ask(world: World) -> tuple[Session, Session, Session, ToolContext, dict[str, str]]:
    """Two siblings under ``ask`` rules and a call of ``a`` to ``b`` the rules stopped."""
    root = world.root("root", {"child": "allow"})
    a, b = world.child(root, "a", ASK), world.child(root, "b", ASK)
    ctx = world.ctx(a)
    args = arguments(b, "hi")
    with pytest.raises(ApprovalRequired):
        world.engine.send_message(ctx, args)
    return root, a, b, ctx, args


def test_holding_logs_the_request_once_and_keeps_an_answered_approval(world: World) -> None:
    _, a, _, ctx, args = _ask(world)
    held = world.engine.hold_for_approval(ctx, "send_message", args, "sibling")
    assert (held.tool, held.arguments, held.label) == ("send_message", args, "sibling")
    assert _last(world, a) == (EventKind.APPROVAL_REQUESTED, {
        "approval_id": held.approval_id, "tool": "send_message", "label": "sibling",
        "tool_call_id": ctx.tool_call_id, "run_id": ctx.run_id,
    })
    world.engine.hold_for_approval(ctx, "send_message", args, "sibling")
    kinds = [e.kind for e in world.engine.events(a.session_id)]
    assert kinds.count(EventKind.APPROVAL_REQUESTED) == 1
    denied = world.engine.answer_approval(held.approval_id, approve=False)
    # The retried call finds its answer, not a fresh pending approval.
    assert world.engine.hold_for_approval(ctx, "send_message", args, "sibling") == denied
    assert world.engine.approvals() == []


def test_holding_needs_a_stored_session_and_run(world: World) -> None:
    _, a, _, ctx, args = _ask(world)
    no_run = ToolContext(a.session_id, "no-run", "c")
    for bad in (no_run, ToolContext("no-session", ctx.run_id, "c")):
        with pytest.raises(InvalidRequest) as caught:
            world.engine.hold_for_approval(bad, "send_message", args, "sibling")
        assert caught.value.message == (
            f"no run {bad.run_id} of session {bad.session_id} to hold")
    assert world.engine.approvals() == []


def test_denial_outcome_and_event(world: World) -> None:
    _, a, _, ctx, args = _ask(world)
    held = world.engine.hold_for_approval(ctx, "send_message", args, "sibling")
    denied = world.engine.answer_approval(held.approval_id, approve=False, scope="tree")
    assert denied.outcome is not None
    outcome = {
        "error": PermissionDenied.code,
        "message": "permission denied: the user did not approve this call",
    }
    assert (denied.scope, denied.outcome.as_result()) == (None, outcome)
    assert _last(world, a) == (EventKind.APPROVAL_ANSWERED, {
        "approval_id": held.approval_id, "state": ApprovalState.DENIED, "scope": None,
        "outcome": {"result": None, **outcome},
    })
    with pytest.raises(UnknownApproval) as caught:
        world.engine.answer_approval(held.approval_id, approve=True)
    assert caught.value.message == (
        f"no pending approval {held.approval_id}; list pending approvals first")


def test_approval_records_scope_grants_once_and_wakes_the_recipient(world: World) -> None:
    _, a, b, ctx, args = _ask(world)
    world.consume_all(b)  # b is finished: the approved send must wake it
    assert world.fresh(b).state == SessionState.FINISHED
    held = world.engine.hold_for_approval(ctx, "send_message", args, "sibling")
    with pytest.raises(InvalidRequest) as caught:
        world.engine.answer_approval(held.approval_id, approve=True, scope="forever")
    assert caught.value.message == (
        "approval scope must be once, session or tree, not 'forever'")
    approved = world.engine.answer_approval(held.approval_id, approve=True, scope="session")
    assert approved.outcome is not None
    assert approved.scope == "session"
    assert world.fresh(b).state == SessionState.QUEUED
    assert _last(world, a) == (EventKind.APPROVAL_ANSWERED, {
        "approval_id": held.approval_id, "state": ApprovalState.APPROVED, "scope": "session",
        "outcome": {"result": approved.outcome.result, "error": None, "message": None},
    })
    # A second approval of the same scope leaves the one grant as it was.
    second = world.ctx(a)
    grant = grant_counter(GrantScope.SESSION, a.session_id, "sibling")
    with world.store.read() as tx:
        assert tx.count(grant) == 1
    again = world.engine.hold_for_approval(second, "send_message", args, "sibling")
    world.engine.answer_approval(again.approval_id, approve=True, scope="session")
    with world.store.read() as tx:
        assert tx.count(grant) == 1


# -- tools -------------------------------------------------------------------------------------


def test_unknown_tool_messages() -> None:
    with pytest.raises(UnknownTool) as caught:
        lookup_tool("send_mesage")
    assert caught.value.message == (
        "there is no tool 'send_mesage': check the spelling. Available tools: "
        "delegate_subagent, get_subagent_result, cancel_subagent, send_message, "
        "message_status, cancel_message"
    )
    assert caught.value.details == {"tool": "send_mesage", "available": TOOL_NAMES}
    with pytest.raises(UnknownTool) as caught:
        lookup_tool("send_message", available=())
    assert caught.value.message == (
        "there is no tool 'send_message': check the spelling. Available tools: none")
    with pytest.raises(TypeError) as wrong:
        tool_definitions("send_message")
    assert str(wrong.value) == "tool_definitions takes an iterable of tool names, not one name"


def test_exported_schemas_are_copies() -> None:
    schema = json_schema("send_message")
    schema["properties"]["mode"]["enum"].append("shout")
    schema["examples"][0]["body"] = "changed"
    parameters = function_parameters("send_message")
    assert parameters["properties"]["mode"]["enum"] == ["steer", "queue"]
    parameters["properties"]["to"]["type"] = "integer"
    fresh = json_schema("send_message")
    assert fresh["properties"]["mode"]["enum"] == ["steer", "queue"]
    assert fresh["properties"]["to"]["type"] == "string"
    assert fresh["examples"][0]["body"] == "Also check the tests folder."
