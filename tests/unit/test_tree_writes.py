"""Every method that writes into a tree is sent to the tree's owner when daemons share a
store: the owner check (``Ownership.guard``) is derived from ``Method.writes``, and here
each handler's code is read to find the methods that reach the store's writer, so a new
writing method without the flag fails this test instead of being answered ``store:fenced``
at a daemon that does not own its tree."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any, cast

import pytest

from treemail.adapters.daemon import handlers
from treemail.adapters.daemon.ownership import Ownership, tree_writes
from treemail.adapters.daemon.routes import ROUTES
from treemail.adapters.runtime.runtime import Runtime
from treemail.adapters.runtime.toolbox import ToolBox
from treemail.adapters.store.leases import Lease, Member
from treemail.protocol import methods as m

# The calls that run a job on the store's one writer (``writer.quiet`` only reads); a tool
# box's writer is its ``call``.
_WRITES = re.compile(r"self\.(rt\.)?writer\(|self\._write\(")
_TOOLBOX_WRITES = re.compile(r"self\.call\(")
# The calls followed into the code they run: the handler's own object's methods, the
# runtime's, the tool box's.
_CALLS = re.compile(r"self\.(?:(rt)\.)?(?:(tools)\.)?(\w+)\(")

# Writes no existing tree: session.create makes a new one (placed, not owner-checked).
_NEW_TREE = {m.SESSION_CREATE.name}


def _writes(fn: Callable[..., Any], owner: type, seen: set[Any]) -> bool:
    """Whether ``fn`` (a method of ``owner``) reaches the writer, directly or through the
    methods it calls."""
    if fn in seen:
        return False
    seen.add(fn)
    source = inspect.getsource(fn)
    if (_TOOLBOX_WRITES if owner is ToolBox else _WRITES).search(source):
        return True
    for rt, tools, name in _CALLS.findall(source):
        target = ToolBox if tools else Runtime if rt else owner
        found = getattr(target, name, None)
        if inspect.isfunction(found) and _writes(found, target, seen):
            return True
    return False


def _writing_methods() -> set[str]:
    """The methods whose handler reaches the store's writer."""
    assert handlers.ROUTES is ROUTES  # the handlers registered (imported above)
    found = set()
    for name in ROUTES.names:
        fn = ROUTES.function(name)
        owner = fn.__globals__[fn.__qualname__.split(".")[0]]
        if _writes(fn, owner, set()):
            found.add(name)
    return found


def test_every_method_that_writes_a_tree_is_owner_checked() -> None:
    writing = _writing_methods()
    flagged = {method.name for method in tree_writes()}
    # The reader is itself checked: it finds the writes it must.
    assert {m.APPROVAL_ANSWER.name, m.MESSAGE_CANCEL.name, m.RUN_SUBMIT.name,
            m.TOOL_CALL.name, m.EXTERNAL_CALL.name, m.SESSION_CREATE.name} <= writing
    assert not writing & {m.SESSION_GET.name, m.APPROVAL_LIST.name, m.MESSAGE_STATUS.name,
                          m.EXTERNAL_TOKENS_LIST.name}
    unchecked = sorted(writing - flagged - _NEW_TREE)
    assert not unchecked, (f"{unchecked} write into a tree but name no tree: give their "
                           "constants writes=... (methods.py) so daemons sharing a store "
                           "send them to the tree's owner")
    # Flags without a write: external.bind, which binds the connection where its session's
    # tree is (its calls write there), and external.tools, which lists what those calls
    # may do, answered there too.
    assert flagged - writing == {m.EXTERNAL_BIND.name, m.EXTERNAL_TOOLS.name}


class _Shared:
    """Leases shared with other daemons (not ``SoleLeases``): the guard wraps handlers."""

    holder = "us"

    def lease(self, tree: str) -> Lease | None:
        return None

    def members(self) -> list[Member]:
        return []


class _Daemon:
    def __init__(self) -> None:
        self.external = None
        self.handlers: dict[str, Any] = {name: self.plain for name in m.METHODS}

    async def plain(self, conn: Any, params: Any) -> str:
        return "handled"


def _guarded() -> set[str]:
    daemon = _Daemon()
    Ownership(cast(Any, _Shared()), cast(Runtime, object()), "/run/us.sock", 3.0).guard(
        cast(Any, daemon))
    return {name for name, handler in daemon.handlers.items() if handler != daemon.plain}


def test_the_guard_wraps_the_flagged_methods_and_session_create() -> None:
    assert _guarded() == {method.name for method in tree_writes()} | _NEW_TREE
    assert m.APPROVAL_ANSWER.name in _guarded()


def test_a_writing_method_without_its_flag_is_not_guarded_and_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The derivation's proof: drop approval.answer's flag, and the guard leaves it open,
    which the coverage test above then reports."""
    unflagged = dataclasses.replace(m.APPROVAL_ANSWER, writes=None)
    monkeypatch.setitem(m.METHODS, m.APPROVAL_ANSWER.name, unflagged)
    assert m.APPROVAL_ANSWER.name not in _guarded()
    with pytest.raises(AssertionError, match=re.escape(m.APPROVAL_ANSWER.name)):
        test_every_method_that_writes_a_tree_is_owner_checked()


def test_a_misspelt_flag_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="approval_idd"):
        dataclasses.replace(m.APPROVAL_ANSWER, writes="approval_idd")

