"""The one registry of treemail's errors: their root ``TreemailError``, and ``declare``, by
which each module that defines error classes joins it.

Each layer declares its own errors in its own module, which registers here with
``declare(__name__)`` (the core imports nothing above it): the core's in
``treemail.core.errors`` and ``treemail.core.refusals``, the wire's codes in
``treemail.protocol.rpc_errors``, the daemon's and its client's in
``treemail.adapters.daemon.errors``, a store URL the store wing cannot open in
``treemail.adapters.store.errors``, a failed model call (``ModelError``) in
``treemail.adapters.runtime.model_errors``. ``registry()`` lists every registered class;
``spec/errors.json`` (which imports every layer) lists them all, and
``tests/unit/test_error_registry.py`` fails on a code declared in any other module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "TreemailError",
    "declare",
    "declaring_modules",
    "registry",
]


class TreemailError(Exception):
    """Root of every error treemail raises."""

    code: ClassVar[str] = "treemail:error"

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details: Mapping[str, object] = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


_DECLARING: list[str] = [__name__]


def declare(module: str) -> None:
    """Register ``module``, a layer's own errors module, into the one registry."""
    if module not in _DECLARING:
        _DECLARING.append(module)


def declaring_modules() -> tuple[str, ...]:
    """The modules whose error classes make the registry: this one, then each declaring
    module, in the order they were imported."""
    return tuple(_DECLARING)


def registry() -> list[type[TreemailError]]:
    """Every error class of a registered module but the root, breadth first (a test's
    subclass, or any class of an unregistered module, is not the API)."""
    found: list[type[TreemailError]] = []
    todo = list(TreemailError.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo.extend(cls.__subclasses__())
        found += [cls] if cls.__module__ in _DECLARING else []
    return found
