"""Handlers are registered by their method's constant: every method of the table has exactly
one, a second one or a constant outside the table is refused, and the daemon will not start
with a method unserved."""

from __future__ import annotations

import pytest

from treemail.adapters.daemon.connection import Connection
from treemail.adapters.daemon.handlers import ROUTES
from treemail.adapters.daemon.routes import Routes
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_EVENT, METHODS, SESSION_GET


def test_every_method_of_the_table_has_exactly_one_handler() -> None:
    # Exactly one: ``handles`` refuses a second (below), so equal sets mean one each.
    assert ROUTES.names == frozenset(METHODS)


def test_a_second_handler_for_one_method_is_refused() -> None:
    routes = Routes()

    async def first(owner: object, conn: Connection, p: t.SessionGetParams) -> t.SessionView:
        raise AssertionError("never called")

    routes.handles(SESSION_GET)(first)
    with pytest.raises(ValueError, match=r"session\.get has two handlers: first and first"):
        routes.handles(SESSION_GET)(first)


def test_a_constant_outside_the_method_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"events/event is not one of METHODS"):
        Routes().handles(EVENTS_EVENT)


def test_binding_with_a_method_unserved_is_refused_at_start() -> None:
    routes = Routes()

    async def get(owner: object, conn: Connection, p: t.SessionGetParams) -> t.SessionView:
        raise AssertionError("never called")

    routes.handles(SESSION_GET)(get)
    with pytest.raises(LookupError, match=r"no handler for .*session\.create"):
        routes.bind(object())
