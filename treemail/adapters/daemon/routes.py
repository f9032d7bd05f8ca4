"""Which function answers which method: handlers register themselves by the method's
constant (``@handles(SESSION_GET)``), so a handler's params and result are the constant's
types (a mismatch is a type error), and no handler is found by spelling its name.

The handlers are methods of a few objects (``handlers.Methods``, ``external.External``), each
holding what its handlers share; ``bind`` pairs each registered function with the object whose
class defines it, once, at the daemon's start.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from treemail.adapters.daemon.connection import Connection
from treemail.protocol.methods import METHODS, Method

__all__ = ["ROUTES", "Handler", "Routes"]

P = TypeVar("P", bound=msgspec.Struct)
R = TypeVar("R", bound=msgspec.Struct)
Owner = TypeVar("Owner")

# A bound handler as the server dispatches to it: the connection and the decoded params in.
Handler = Callable[[Connection, Any], Awaitable[msgspec.Struct]]
_Unbound = Callable[[Any, Connection, Any], Awaitable[msgspec.Struct]]


class Routes:
    """The handlers registered so far, by method name: at most one each."""

    def __init__(self) -> None:
        self._handlers: dict[str, _Unbound] = {}

    def handles(self, method: Method[P, R]) -> Callable[
            [Callable[[Owner, Connection, P], Awaitable[R]]],
            Callable[[Owner, Connection, P], Awaitable[R]]]:
        """Register the decorated ``async def (self, conn, params: P) -> R`` as the one
        handler of ``method``; a second one for the same method is refused at import."""
        if METHODS.get(method.name) is not method:
            raise ValueError(f"{method.name} is not one of METHODS; add its constant there")

        def register(fn: Callable[[Owner, Connection, P], Awaitable[R]]
                     ) -> Callable[[Owner, Connection, P], Awaitable[R]]:
            if method.name in self._handlers:
                raise ValueError(f"{method.name} has two handlers: "
                                 f"{self._handlers[method.name].__name__} and {fn.__name__}")
            self._handlers[method.name] = fn
            return fn

        return register

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._handlers)

    def function(self, name: str) -> Callable[..., Awaitable[msgspec.Struct]]:
        """The function registered for ``name``, unbound (read by the tests that check
        what each handler does)."""
        return self._handlers[name]

    def bind(self, *owners: object) -> dict[str, Handler]:
        """Every handler, bound to the one of ``owners`` whose class defines it; a method of
        ``METHODS`` without a handler, or a handler without its owner, is a bug, refused
        here, at the daemon's start."""
        missing = sorted(set(METHODS) - set(self._handlers))
        if missing:
            raise LookupError(f"no handler for {', '.join(missing)}")

        def bound(fn: _Unbound) -> Handler:
            owner = next((o for o in owners if getattr(type(o), fn.__name__, None) is fn), None)
            if owner is None:
                raise LookupError(f"{fn.__qualname__}: none of the objects bound defines it")
            return lambda conn, params: fn(owner, conn, params)

        return {name: bound(fn) for name, fn in self._handlers.items()}


# The daemon's one table: the handlers of ``handlers.py`` and ``external.py`` register here.
ROUTES = Routes()
