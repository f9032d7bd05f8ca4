"""Identifiers: session UUIDs, tree-scoped handles, and the port that mints new ids.

The core never generates randomness itself: an ``IdSource`` is handed in, so the adapters
use ``uuid4`` while tests and the model checker use a deterministic counter.
"""

from __future__ import annotations

import re
from typing import Protocol

__all__ = [
    "CountingIds",
    "IdSource",
    "canonical_uuid",
    "make_handle",
    "storable",
]

# Only the canonical 8-4-4-4-12 spelling is a session reference; anything else is a handle.
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


class IdSource(Protocol):
    """Mints globally unique ids in canonical lower-case UUID form."""

    def new_id(self) -> str: ...


class CountingIds:
    """Deterministic ids for tests and model checking: UUID-shaped, numbered from ``start``."""

    def __init__(self, start: int = 1, namespace: int = 0) -> None:
        self._next = start
        self._namespace = namespace

    def new_id(self) -> str:
        # ``peek`` written out: the model checker mints ids by the million.
        number = self._next
        self._next = number + 1
        return f"{number:08x}-0000-4000-8000-{self._namespace:012x}"

    def peek(self) -> str:
        """The id ``new_id`` will mint next, minting nothing."""
        # The counter leads, so handles (the first 8 hex digits) stay distinct.
        return f"{self._next:08x}-0000-4000-8000-{self._namespace:012x}"


# Longest reference worth a lookup, in UTF-8 bytes: handles are short, UUIDs 36 bytes. It is
# counted in bytes, not characters, because ids become parts of store keys and LMDB bounds a
# key at 511 bytes: 130 emoji are 130 characters but 520 bytes.
MAX_REFERENCE = 256


def storable(reference: str) -> bool:
    """Whether ``reference`` could name anything stored: printable (no NUL, no control
    character, no lone surrogate) and at most ``MAX_REFERENCE`` bytes of UTF-8. Anything else
    names nothing, so it is answered without a store lookup, the same on every store."""
    # isprintable() first: it refuses lone surrogates, which UTF-8 cannot encode. A character
    # is at most 4 bytes of UTF-8, so a short reference (every id) is measured uncoded.
    return (bool(reference) and reference.isprintable()
            and (len(reference) <= MAX_REFERENCE // 4
                 or len(reference.encode("utf-8")) <= MAX_REFERENCE))


# The references found to spell a UUID, each with its lower-case spelling: a send names the
# same few peers over and over, and matching and lowering one cost two calls at every send.
# Only UUIDs are kept (36 characters each), so a model's odd references cannot fill it.
_CANONICAL: dict[str, str] = {}
_CANONICAL_LIMIT = 1 << 12


def canonical_uuid(reference: str) -> str | None:
    """The lower-case UUID ``reference`` spells, or ``None`` when it is not a UUID."""
    global _CANONICAL
    known = _CANONICAL
    if reference in known:  # a membership test is no call, unlike ``.get``
        return known[reference]
    if _UUID_RE.fullmatch(reference) is None:  # `$` alone lets a trailing "\n" through
        return None
    if len(known) >= _CANONICAL_LIMIT:
        # A new dict, not the old one cleared: a thread between its membership test and its
        # lookup holds the old one, where its entry still is.
        _CANONICAL = known = {}
    canonical = known[reference] = reference.lower()
    return canonical


def make_handle(agent_name: str, session_id: str) -> str:
    """``<agent name>_<first 8 hex of the uuid>``: short, readable, unique within a tree."""
    return f"{agent_name}_{session_id.replace('-', '')[:8]}"
