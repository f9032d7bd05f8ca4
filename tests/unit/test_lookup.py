"""The command line's session, message and approval forms resolve to one id, or refuse:
never a guess."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec
import pytest

from treemail.adapters.daemon import lookup
from treemail.adapters.daemon.client import DaemonClient
from treemail.core.errors import InvalidRequest, UnknownTarget
from treemail.core.lifecycle import ApprovalState, MessageState, SessionState
from treemail.protocol.methods import APPROVAL_LIST, MESSAGE_LIST, SESSION_LIST

A = "0d0893d3-1111-4111-8111-111111111111"
B = "0d0893d3-2222-4222-8222-222222222222"
C = "7ad0d8bf-3333-4333-8333-333333333333"


class Listing:
    """The methods lookup calls, answered from fixed sessions and their messages; the list
    methods answer one item a page, so a lookup that read only the first page would miss."""

    def __init__(self, sessions: dict[str, str | None], messages: dict[str, list[str]],
                 held: tuple[str, ...] = ()) -> None:
        self.sessions, self.messages, self.held = sessions, messages, held

    # The real client's typed calls and paging, over this answering of raw calls.
    request, request_many, pipeline = (DaemonClient.request, DaemonClient.request_many,
                                       DaemonClient.pipeline)
    pages, every = DaemonClient.pages, DaemonClient.every

    async def call_many_raw(self, calls: list[tuple[str, Any]], *,
                            timeout: float | None = None) -> list[Any]:
        return [self.call(method, msgspec.to_builtins(params)) for method, params in calls]

    def call(self, method: str, asked: dict[str, Any]) -> dict[str, Any]:
        if method == APPROVAL_LIST.name:
            return {"approvals": [_approval(a) for a in self.held]}
        if method == SESSION_LIST.name:
            return _page("sessions", [_session(sid, handle)
                                      for sid, handle in self.sessions.items()], asked)
        assert method == MESSAGE_LIST.name
        return _page("messages", [_message(m, asked["session_id"])
                                  for m in self.messages[asked["session_id"]]], asked)


def _session(sid: str, handle: str | None) -> dict[str, Any]:
    return {"session_id": sid, "root_session_id": sid, "parent_session_id": None,
            "handle": handle, "agent": "default", "state": SessionState.IDLE, "run_id": None,
            "live": True}


def _message(message_id: str, recipient: str) -> dict[str, Any]:
    return {"message_id": message_id, "recipient": recipient, "sender": None,
            "owner": "user", "mode": "queue", "state": MessageState.CONSUMED, "body": "",
            "run_id": None, "reason": None}


def _approval(approval_id: str) -> dict[str, Any]:
    session_id, run_id, tool_call_id = approval_id.split("/")
    return {"approval_id": approval_id, "session_id": session_id, "run_id": run_id,
            "tool_call_id": tool_call_id, "tool": "send_message", "arguments": {},
            "label": "sibling", "state": ApprovalState.PENDING, "scope": None, "outcome": None}


def _page(field: str, items: list[dict[str, Any]], asked: dict[str, Any]) -> dict[str, Any]:
    after = asked.get("after", 0)
    return {field: items[after:after + 1], "next": after + 1 if after + 1 < len(items) else None}


def _resolve(listing: Listing, kind: str, text: str) -> str:
    client = cast(DaemonClient, listing)
    find = {"session": lookup.session_id, "message": lookup.message_id,
            "approval": lookup.approval_id}[kind]
    return asyncio.run(find(client, text))


HELD = (f"{A}/run-1/call-1", f"{A}/run-1/call-2", f"{C}/run-3/call-1")
TWO_TREES = Listing({A: "lead_0d0893d3", B: "worker", C: "worker"}, {A: [C], B: [A, B], C: []},
                    HELD)


@pytest.mark.parametrize(("text", "expected"), [
    (A, A),                    # a UUID passes as it is, even one no session has
    ("lead_0d0893d3", A),      # a handle
    ("7ad0", C),               # a unique prefix
])
def test_a_session_form_names_one_session(text: str, expected: str) -> None:
    assert _resolve(TWO_TREES, "session", text) == expected


def test_a_handle_in_two_trees_and_a_shared_prefix_are_ambiguous() -> None:
    with pytest.raises(InvalidRequest, match="names 2 sessions"):
        _resolve(TWO_TREES, "session", "worker")
    with pytest.raises(InvalidRequest, match="names 2 sessions") as shared:
        _resolve(TWO_TREES, "session", "0d0893d3")
    assert A in str(shared.value) and B in str(shared.value)


def test_a_short_or_unknown_form_names_nothing() -> None:
    for kind, text in (("session", "0d0"), ("session", "ffff"), ("message", "7ad"),
                       ("message", "ffff")):
        with pytest.raises(UnknownTarget, match="`treemail"):
            _resolve(TWO_TREES, kind, text)


def test_a_message_prefix_is_looked_up_across_every_session() -> None:
    assert _resolve(TWO_TREES, "message", "7ad0d8bf") == C
    with pytest.raises(InvalidRequest, match="names 2 messages"):
        _resolve(TWO_TREES, "message", "0d08")


def test_a_held_call_by_the_prefix_its_row_prints() -> None:
    assert _resolve(TWO_TREES, "approval", "7ad0d8bf") == HELD[2]
    assert _resolve(TWO_TREES, "approval", f"{A}/run-1/call-2") == HELD[1]
    answered = f"{B}/run-9/call-9"  # no longer held: passed on for the daemon to say so
    assert _resolve(TWO_TREES, "approval", answered) == answered
    with pytest.raises(InvalidRequest, match="names 2 held calls"):
        _resolve(TWO_TREES, "approval", "0d0893d3")
    for text in ("0d0", "ffff"):
        with pytest.raises(UnknownTarget, match="`treemail approve`"):
            _resolve(TWO_TREES, "approval", text)


def test_approvals_of_one_session_have_short_ids_of_their_own() -> None:
    """The rows print an approval's short id: the session's prefix would be the same for
    every approval of the session, so it could name none of them."""
    shorts = [lookup.short_approval_id(a) for a in HELD]
    assert len(set(shorts)) == len(HELD)
    assert all(len(s) == 8 and int(s, 16) >= 0 for s in shorts)
    assert not any(s.startswith(a[:4]) for s, a in zip(shorts, HELD, strict=True))
    for short, held in zip(shorts, HELD, strict=True):
        assert _resolve(TWO_TREES, "approval", short) == held
        assert _resolve(TWO_TREES, "approval", short[:5]) == held


def test_an_approval_prefix_with_slashes_is_looked_up_not_passed_on() -> None:
    # Two slashes, yet a prefix of two held calls: ambiguous, never sent on as an id.
    with pytest.raises(InvalidRequest, match="names 2 held calls") as both:
        _resolve(TWO_TREES, "approval", f"{A}/run-1/call-")
    assert f"approval {lookup.short_approval_id(HELD[0])}" in str(both.value)
    assert _resolve(TWO_TREES, "approval", f"{C}/run-3/ca") == HELD[2]
    assert _resolve(TWO_TREES, "approval", f"{C}/run") == HELD[2]


def test_a_mistyped_handle_names_the_close_ones() -> None:
    with pytest.raises(UnknownTarget, match=r"no session named 'wroker'; did you mean "
                                            r"'worker'\? `treemail sessions`") as near:
        _resolve(TWO_TREES, "session", "wroker")
    assert "`treemail sessions`" in str(near.value)
    with pytest.raises(UnknownTarget) as far:
        _resolve(TWO_TREES, "session", "zzzzzzzzzz")
    assert "did you mean" not in str(far.value)
