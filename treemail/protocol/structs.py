"""The bases of protocol 19's wire types: ``Params`` (strict: an unknown field is an error),
``GroupedParams`` (with ``EXACTLY_ONE_OF`` groups), ``Result`` (read leniently by clients),
and the paging bounds every list method shares. ``treemail.protocol.types`` re-exports them.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

import msgspec

from treemail.protocol.rules import check_exactly_one_of

__all__ = [
    "PAGE_BODY_BYTES",
    "PAGE_LIMIT",
    "Cursor",
    "Empty",
    "GroupedParams",
    "Limit",
    "Params",
    "Result",
    "Scope",
]

Scope = Literal["once", "session", "tree"]

# The list methods answer in pages: at most this many items (the default, and the most a
# ``limit`` may ask for), so no answer grows with the store.
PAGE_LIMIT: Final = 256
# A page of ``message.list`` also stops once its bodies pass this many UTF-8 bytes (it still
# holds at least one message), so a page of large bodies stays about a megabyte.
PAGE_BODY_BYTES: Final = 1 << 20
Limit = Annotated[int, msgspec.Meta(ge=1, le=PAGE_LIMIT)]
Cursor = Annotated[int, msgspec.Meta(ge=0)]


class Params(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base of every params object: strict, so a misspelt field is an error, not a no-op.
    A field left at its default is not sent: a request carries what its caller set."""


class GroupedParams(Params):
    """Params with ``EXACTLY_ONE_OF``: groups of fields of which exactly one must be given
    (not null). Decoding refuses params that break a group, and the bindings state each
    group as a schema ``oneOf``, so both refuse the same params. (A base of its own: the
    check costs every decode a Python call, so only these pay it.)"""

    EXACTLY_ONE_OF: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def __post_init__(self) -> None:
        check_exactly_one_of(self, self.EXACTLY_ONE_OF)


class Result(msgspec.Struct, kw_only=True):
    """Base of every result object."""


class Empty(Params):
    """No params."""
