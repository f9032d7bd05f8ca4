"""The command line's session and message forms resolve to one id, or refuse: never a guess."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from treemail.adapters.daemon import lookup
from treemail.adapters.daemon.client import DaemonClient
from treemail.core.errors import InvalidRequest, UnknownTarget

A = "0d0893d3-1111-4111-8111-111111111111"
B = "0d0893d3-2222-4222-8222-222222222222"
C = "7ad0d8bf-3333-4333-8333-333333333333"


class Listing:
    """The two methods lookup calls, answered from fixed sessions and their messages."""

    def __init__(self, sessions: dict[str, str | None], messages: dict[str, list[str]]) -> None:
        self.sessions, self.messages = sessions, messages

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        if method == "session.list":
            return {"sessions": [{"session_id": sid, "handle": handle}
                                 for sid, handle in self.sessions.items()]}
        assert method == "message.list" and params is not None
        return {"messages": [{"message_id": m} for m in self.messages[params["session_id"]]]}


def _resolve(listing: Listing, kind: str, text: str) -> str:
    client = cast(DaemonClient, listing)
    find = lookup.session_id if kind == "session" else lookup.message_id
    return asyncio.run(find(client, text))


TWO_TREES = Listing({A: "lead_0d0893d3", B: "worker", C: "worker"}, {A: [C], B: [A, B], C: []})


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
