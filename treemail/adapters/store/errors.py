"""The store wing's own errors: a store URL it cannot open. The classes register into the one
registry of ``treemail.core.errors`` (the core names no URL form nor driver: these do), so
``spec/errors.json`` lists them with the core's. A store's runtime faults (closed, damaged,
locked, fenced...) stay the core's ``StorageError``s: every backend, the core's in-memory one
included, raises them through the store port.
"""

from __future__ import annotations

from treemail.core import errors

__all__ = [
    "StoreDriverMissing",
    "StoreUrlUnknown",
]

errors.declare(__name__)


# -- choosing a store ------------------------------------------------------------------


class StoreUrlUnknown(errors.DefinitionError):
    """A store URL of a form treemail cannot open; the message lists the forms it accepts."""

    code = "store:unknown_url"


class StoreDriverMissing(errors.DefinitionError):
    """The store URL names a backend whose driver is not installed; install the extra named."""

    code = "store:driver_missing"
