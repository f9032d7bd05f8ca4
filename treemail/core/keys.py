"""The store's key layout: every table, the type of its values, and the bytes of its keys.

Pure: no I/O. Every store backend keys its tables with exactly these bytes, so all backends
agree on order and on what a key may hold, and ``treemail verify`` can
rebuild every index from the records with the same functions that wrote it.

Index keys put the owner first and a big-endian number last, so byte order is the order the
Store port promises and every read is a point lookup or a prefix range over one owner's rows.

Every named counter is of one ``Counter`` kind, and its name (a ``CounterName``) is built by
this module's constructors alone (``inbox_counter`` ...) and read back by ``counter_kind``:
the store port takes a ``CounterName``, so mypy refuses a name spelt by hand elsewhere.

A session's tally row keeps the numbers one send reads and writes together: the seq of the
session's last event, and the counters named ``<kind>/.../<session id>`` for the kinds in
``TALLIED`` (its next message seq, its pending agent mail, and per sender the pair's pending
mail). A send reads that one row and writes it once, instead of four counter and last-seq rows.

Why a NUL separator: key parts are UUIDs, handles and tool-call ids, none of which contains
NUL (UTF-8 never yields a 0 byte for anything but U+0000, which is refused). So ``id + SEP``
is a prefix no other id's keys share, and ids of any length stay possible up to ``MAX_KEY``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from typing import NewType

import attrs

from treemail.core.errors import StorageError, StoreDamaged
from treemail.core.ids import MAX_REFERENCE
from treemail.core.records import (
    Approval,
    Event,
    GrantScope,
    IdempotencyKey,
    Message,
    ProducerKey,
    Run,
    SendResult,
    Session,
)

__all__ = [
    "HEADS",
    "MAX_KEY",
    "NUMBERED",
    "OWNED",
    "SEP",
    "SEQ_LIMIT",
    "SESSIONS_COUNTER",
    "TALLIED",
    "VALUE_KINDS",
    "Counter",
    "CounterName",
    "CounterPlace",
    "Table",
    "Tally",
    "call_replay",
    "counter",
    "counter_kind",
    "counter_place",
    "delegation_counter",
    "event",
    "event_seq",
    "events_of",
    "external_session_counter",
    "external_token_counter",
    "feed",
    "feed_number",
    "grant_counter",
    "handle",
    "identity",
    "inbox_counter",
    "logical_key",
    "lookup",
    "pair_counter",
    "pending",
    "pending_of",
    "replay",
    "runs_counter",
    "seq_bytes",
    "seq_counter",
    "storable_call_replay",
    "stored_key",
    "stored_prefix",
    "table_of",
    "tallied_name",
    "tree",
    "tree_of",
]


class Table(enum.StrEnum):
    """The store's tables: records first, then the indexes and counters derived from them."""

    SESSIONS = "sessions"
    RUNS = "runs"
    MESSAGES = "messages"
    REPLAY = "replay"
    EVENTS = "events"
    APPROVALS = "approvals"
    TREE = "tree"  # root + SEP + ordinal -> session id
    HANDLES = "handles"  # root + SEP + handle -> live session id
    PENDING = "pending"  # recipient + SEP + seq -> message id, while the message is pending
    COUNTERS = "counters"  # name -> int, never 0 (every counter not kept in a tally)
    TALLY = "tally"  # session id -> Tally: its last event seq and its TALLIED counters
    FEED = "feed"  # number (from 1, dense) -> the event's key


@attrs.frozen
class Tally:
    """A session's tally row: the seq of its last event, and its ``TALLIED`` counters by slot
    (the counter's name without its final ``/<session id>``), none of them 0. Replaced whole
    on every change, never mutated: a forked MemoryStore shares it with its twin."""

    last_event: int = 0
    counters: dict[str, int] = attrs.field(factory=dict)


# What each table's values are; ``bytes`` is a raw key of another table.
VALUE_KINDS: Mapping[Table, type[object]] = {
    Table.SESSIONS: Session,
    Table.RUNS: Run,
    Table.MESSAGES: Message,
    Table.REPLAY: SendResult,
    Table.EVENTS: Event,
    Table.APPROVALS: Approval,
    Table.TREE: str,
    Table.HANDLES: str,
    Table.PENDING: str,
    Table.COUNTERS: int,
    Table.TALLY: Tally,
    Table.FEED: bytes,
}

SEP = b"\x00"
# LMDB's default limit; enforced for every backend so that a key one store takes is never
# refused by another.
MAX_KEY = 511
SEQ_LIMIT = 1 << 64


# Cached: the same few ids are keyed over and over within a send (and across a model
# check's states), and encoding plus checking them was the store's largest cost.
@functools.lru_cache(maxsize=1 << 14)
def identity(text: str) -> bytes:
    """One key part: a record's id, a counter's name."""
    raw = text.encode()
    if SEP in raw:
        raise StorageError(f"a store key cannot contain NUL: {text!r}")
    if len(raw) > MAX_KEY:
        raise StorageError(f"a store key must be at most {MAX_KEY} bytes, not {len(raw)}: "
                           f"{text[:40]!r}...")
    return raw


@functools.lru_cache(maxsize=1 << 14)
def lookup(text: str) -> bytes:
    """``identity(text)`` for a read, or ``b""`` when no store could key ``text`` (empty, NUL,
    a lone surrogate, over ``MAX_KEY`` bytes): an id that names nothing. Cached with the
    answer, so a read of a known id costs no call."""
    try:
        return identity(text)
    except (StorageError, UnicodeEncodeError):
        return b""


def seq_bytes(number: int) -> bytes:
    # Big-endian, so byte order is numeric order within a prefix. ``to_bytes`` refuses a
    # number outside 64 unsigned bits itself, so the two keys every send writes with a seq
    # (``pending``, ``event``) call it directly, not through this function.
    try:
        return number.to_bytes(8, "big")
    except OverflowError:
        raise _seq_refused(number) from None


def _seq_refused(number: int) -> StorageError:
    return StorageError(f"a store sequence number must fit in 64 unsigned bits: {number}")


@functools.lru_cache(maxsize=1 << 14)
def _owned(owner: str) -> bytes:
    return identity(owner) + SEP


counter = identity


class Counter(enum.StrEnum):
    """The kinds of named counter. A counter's name is its kind, then ``/`` and its parts."""

    SESSIONS = "sessions"  # the last session ordinal handed out (no parts)
    SEQ = "seq"  # seq/<session>: the session's last message seq
    RUNS = "runs"  # runs/<session>: the session's last run number
    INBOX = "inbox"  # inbox/<recipient>: its pending agent mail (the inbox guard)
    PAIR = "pair"  # pair/<sender>/<recipient>: the directed pair's pending mail
    GRANT = "grant"  # grant/<scope>/<subject>/<operation>/<label>: a user's approval
    DELEGATION = "delegation"  # delegation/<session>: set once its result reached the parent


CounterName = NewType("CounterName", str)

SESSIONS_COUNTER = CounterName(Counter.SESSIONS.value)


def _named(kind: str, *parts: str) -> CounterName:
    return CounterName("/".join((kind, *parts)))


# Each kind's name as a plain str, read once: a member read through its class goes through
# ``EnumType.__getattr__``'s hook under Python 3.11, and an enum formats slower than a str.
_SEQ, _RUNS, _INBOX, _PAIR, _GRANT, _DELEGATION = (kind.value for kind in (
    Counter.SEQ, Counter.RUNS, Counter.INBOX, Counter.PAIR, Counter.GRANT, Counter.DELEGATION))


# The counters every send names (its seq and its two guard counters) are spelt as f-strings:
# a format costs no call, where ``_named`` costs two, and the text is the same.
def seq_counter(session_id: str) -> CounterName:
    return CounterName(f"{_SEQ}/{session_id}")


def runs_counter(session_id: str) -> CounterName:
    return _named(_RUNS, session_id)


def inbox_counter(recipient: str) -> CounterName:
    return CounterName(f"{_INBOX}/{recipient}")


def pair_counter(sender: str, recipient: str) -> CounterName:
    return CounterName(f"{_PAIR}/{sender}/{recipient}")


def grant_counter(scope: GrantScope, subject: str, operation: str, label: str) -> CounterName:
    return _named(_GRANT, scope.value, subject, operation, label)


def delegation_counter(session_id: str) -> CounterName:
    """The flag set once a delegated session has reported its result to its parent."""
    return _named(_DELEGATION, session_id)


# The external sessions' counters predate the kinds above and keep their stored names; they
# are of no ``Counter`` kind ("external/" also begins wire method names), built here alone.
def external_session_counter(session_id: str) -> CounterName:
    """1 while the session is external (no actor hosts it)."""
    return CounterName(f"external/session/{session_id}")


def external_token_counter(digest: str) -> CounterName:
    """1 while the token with that digest is live."""
    return CounterName(f"external/token/{digest}")


_KINDS = {kind.value: kind for kind in Counter}


def counter_kind(name: str) -> Counter | None:
    """The kind of counter ``name``: the text before its first ``/``; None if no kind's."""
    return _KINDS.get(name.partition("/")[0])


# The counter kinds kept in the tally of the session their name ends with (see above).
TALLIED = frozenset({Counter.SEQ, Counter.INBOX, Counter.PAIR})


@attrs.frozen
class CounterPlace:
    """Where a tallied counter is kept: the owner's tally key, and its slot in that row."""

    owner: bytes
    slot: str


@functools.lru_cache(maxsize=1 << 14)
def counter_place(name: str) -> CounterPlace | None:
    """The tally row and slot of counter ``name``, or None when the counters table keeps it.
    The owner is the text after the name's last ``/``, so ``slot + "/" + owner`` is the name
    again (``tallied_name``): every name has one place, whatever its ids hold."""
    if counter_kind(name) not in TALLIED or "/" not in name:
        return None
    slot, _, owner = name.rpartition("/")
    if not owner:
        return None
    return CounterPlace(identity(owner), slot)


def tallied_name(owner: bytes, slot: str) -> CounterName:
    """The name of the counter at ``slot`` of ``owner``'s tally: ``counter_place`` undone."""
    return CounterName(f"{slot}/{owner.decode()}")


tree_of = _owned  # the prefix of a tree's rows (see ``pending_of``)


def tree(root: str, ordinal: int) -> bytes:
    return _owned(root) + seq_bytes(ordinal)


@functools.lru_cache(maxsize=1 << 14)
def handle(root: str, name: str) -> bytes:
    # Cached, as ``identity``: a session's handle row is looked for at every step of it.
    return _owned(root) + identity(name)


# The prefix of a recipient's pending rows: ``_owned`` itself, whose cache answers without a
# call of ours (the checker scans pending mail several times per step).
pending_of = _owned


def pending(recipient: str, seq: int) -> bytes:
    try:  # ``seq_bytes`` written out: every send keys its pending entry
        return _owned(recipient) + seq.to_bytes(8, "big")
    except OverflowError:
        raise _seq_refused(seq) from None


def replay(key: IdempotencyKey | ProducerKey) -> bytes:
    """The replay row of a tool call (session, run, call id) or of a producer's keyed send.

    A producer's row is ``session + SEP + SEP + kind + SEP + key``: where a tool call's row
    holds its run id, a producer's holds nothing. A run id is never empty (minted, and
    checked storable before any lookup), so the two layouts share one table and no key."""
    if isinstance(key, ProducerKey):
        return _owned(key.session_id) + SEP + _owned(key.owner.value) + identity(key.key)
    return call_replay(key)


def call_replay(key: IdempotencyKey) -> bytes:
    """``replay`` of a tool call's key: what every send reads, without asking its class."""
    return _owned(key.session_id) + _owned(key.run_id) + identity(key.tool_call_id)


def storable_call_replay(key: IdempotencyKey) -> bytes:
    """``call_replay`` of a key whose call id ``ids.storable`` passed, as every send's did
    (``ReadTxn.tool_call``): printable, so without NUL, and at most ``MAX_REFERENCE`` bytes,
    under ``MAX_KEY``, it passes ``identity``'s checks, so its UTF-8 is its key part. The id
    is checked once, not twice, and a send's new call id, which ``identity``'s cache would
    miss every time, does not push out an id that reads hit (two calls a send)."""
    return _owned(key.session_id) + _owned(key.run_id) + key.tool_call_id.encode()


assert MAX_REFERENCE <= MAX_KEY, "a storable id must pass identity's checks"


events_of = _owned  # the prefix of a session's log (see ``pending_of``)


def event(session_id: str, seq: int) -> bytes:
    try:  # ``seq_bytes`` written out: every event is keyed here
        return _owned(session_id) + seq.to_bytes(8, "big")
    except OverflowError:
        raise _seq_refused(seq) from None


def event_seq(key: bytes) -> int:
    """The seq at the end of an ``event`` (or ``pending`` or ``tree``) key."""
    return int.from_bytes(key[-8:], "big")


feed = seq_bytes  # a feed row's key is its number


def feed_number(key: bytes) -> int:
    return int.from_bytes(key, "big")


# -- one key space ---------------------------------------------------------------------------
#
# A store whose tables are separate B-trees (LMDB's named databases) dirties at least one leaf
# page per table a send writes, plus each tree's branch pages and its root's record: a send
# writes six rows into six tables. ``stored_key`` lays every table out in ONE ordered key
# space instead, chosen so that the rows one send writes are neighbours:
#
# * rows that belong to a session (its events, its pending mail, its tally, the replay rows
#   of its tool calls, and for a root its tree and handles) are keyed by that session first:
#   ``owner + SEP + tag + rest``. A send writes its recipient's event, pending entry and
#   tally: the tags put them next to each other (the log's end, then the pending range, then
#   the tally), so they share a leaf page, and a recipient's pending mail is still one range;
# * rows found by their own id or number (sessions, runs, messages, approvals, counters, the
#   feed) keep a range of their table's own: ``SEP + tag + key``. No id starts with SEP, so
#   the two families never meet; the feed's range ends at its newest entry, where it grows.
#
# The stored value (and its checksum) is that of the table's key, so the same rows move
# between the two layouts byte for byte. Backends without pages (memory, PostgreSQL) key
# their rows by ``(table, key)`` and need none of this.

_TAGS: Mapping[Table, bytes] = {
    # a session's rows, in the order a send wants them adjacent
    Table.EVENTS: b"1",
    Table.PENDING: b"2",
    Table.TALLY: b"3",
    Table.REPLAY: b"4",
    Table.TREE: b"5",
    Table.HANDLES: b"6",
    # rows by id or number
    Table.SESSIONS: b"S",
    Table.RUNS: b"R",
    Table.MESSAGES: b"M",
    Table.APPROVALS: b"A",
    Table.COUNTERS: b"C",
    Table.FEED: b"F",
}
# Tables whose keys begin with their owner's id and SEP (the tally's key is the id alone).
OWNED = frozenset((Table.EVENTS, Table.PENDING, Table.TALLY, Table.REPLAY, Table.TREE,
                   Table.HANDLES))
_BY_TAG = {tag[0]: table for table, tag in _TAGS.items()}
# The stored prefix of each table of rows by id or number: its row ``key`` is stored at
# ``HEADS[table] + key`` (``stored_key``, without a call).
HEADS: Mapping[Table, bytes] = {table: SEP + tag for table, tag in _TAGS.items()
                                if table not in OWNED}
# The session's rows keyed by its id, SEP and an 8-byte number (``pending``, ``event``,
# ``tree``), and their tags: such a row ``key`` is stored at ``key[:-8] + NUMBERED[table] +
# key[-8:]``, the owner and SEP being all but the number (no search for SEP). A send writes
# two of them under new keys, which ``stored_key``'s cache would miss (and drop a key that
# reads hit), so a flush builds them from this, without a call.
NUMBERED: Mapping[Table, bytes] = {table: _TAGS[table]
                                   for table in (Table.EVENTS, Table.PENDING, Table.TREE)}


# Cached: a send reads and writes the same few rows of its sessions, run and tally every time.
@functools.lru_cache(maxsize=1 << 12)
def stored_key(table: Table, key: bytes) -> bytes:
    """Where row ``key`` of ``table`` lives in the one key space."""
    tag = _TAGS[table]
    if table is Table.TALLY:
        return key + SEP + tag
    if table in NUMBERED:
        return key[:-8] + tag + key[-8:]
    if table in OWNED:
        cut = key.index(SEP) + 1
        return key[:cut] + tag + key[cut:]
    return SEP + tag + key


def stored_prefix(table: Table, prefix: bytes) -> bytes:
    """The stored prefix of ``table``'s keys that start with ``prefix``: for a session's
    rows, ``prefix`` holds at least the owner and SEP (every scan of them does)."""
    if table in OWNED and table is not Table.TALLY:
        cut = prefix.index(SEP) + 1  # a prefix may stop before the number: find SEP
        return prefix[:cut] + _TAGS[table] + prefix[cut:]
    if table in OWNED:
        raise StorageError("a tally is read by its owner, not scanned")
    return SEP + _TAGS[table] + prefix


def table_of(stored: bytes) -> Table:
    """The table a stored key belongs to; ``StoreDamaged`` for a key of none (a damaged
    byte where its tag or separator was), which ``treemail verify`` then reports instead of
    losing the row from every table unseen."""
    try:
        if stored[:1] == SEP:
            return _BY_TAG[stored[1]]
        return _BY_TAG[stored[stored.index(SEP) + 1]]
    except (IndexError, KeyError, ValueError):
        raise StoreDamaged(f"the stored key {stored!r} belongs to no table: a damaged key; "
                           "restore the store from a copy", db="rows", key=stored) from None


def logical_key(stored: bytes) -> tuple[Table, bytes]:
    """``stored_key`` undone: the table and its key."""
    table = table_of(stored)
    if table not in OWNED:
        return table, stored[2:]
    cut = stored.index(SEP) + 1
    if table is Table.TALLY:
        return table, stored[:cut - 1]
    return table, stored[:cut] + stored[cut + 1:]
