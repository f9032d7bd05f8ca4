"""Additive or breaking: each difference between a pinned schema bundle and the current one.

A released protocol version is pinned as a snapshot of its bundle. A change a client of the
pinned version still works with is additive: a new method, notification or event kind, a
new optional params field, any new result field, a new enum value (clients tolerate values
and kinds they do not know). Anything else breaks such a client: a method, field, kind or
enum value removed, a type or a constraint changed, a params field made required, a result
field made optional. Additive changes keep the version and are listed in the protocol
changelog; a breaking one needs a new version.

Each type is compared once, by name, in the direction(s) it travels: ``in`` (client to
daemon: params, a server request's answer) and ``out`` (daemon to client). Words that only
describe (``description``, ``title``, ``summary``) are not compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final, Literal, NamedTuple

__all__ = ["ADDITIVE", "BREAKING", "Difference", "compare"]

ADDITIVE: Final = "additive"
BREAKING: Final = "breaking"
Direction = frozenset[Literal["in", "out"]]
_IN: Direction = frozenset({"in"})
_OUT: Direction = frozenset({"out"})
_BOTH: Direction = _IN | _OUT
_PROSE: Final = frozenset({"description", "title", "summary", "$comment"})
_TABLES: Final = ("methods", "notifications", "server_requests")


class Difference(NamedTuple):
    """One difference: its class, what it concerns (``subject``, what the changelog names)
    and what changed."""

    kind: str
    subject: str
    what: str

    def __str__(self) -> str:
        return f"{self.kind}: `{self.subject}`: {self.what}"


def _name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _directions(bundle: dict[str, Any]) -> dict[str, Direction]:
    """Each def's direction(s): the union over every route that reaches it."""
    roots: list[tuple[str, Direction]] = []
    for table in _TABLES:
        for entry in bundle[table].values():
            sent_by_client = table == "methods"
            roots.append((_name(entry["params"]["$ref"]), _IN if sent_by_client else _OUT))
            roots.append((_name(entry["result"]["$ref"]), _OUT if sent_by_client else _IN))
    roots += [(_name(frame["$ref"]), _BOTH) for frame in bundle.get("frames", {}).values()]
    found: dict[str, Direction] = {}
    todo = roots
    while todo:
        name, way = todo.pop()
        if name not in bundle["$defs"] or way <= found.get(name, frozenset()):
            continue
        found[name] = found.get(name, frozenset()) | way
        todo += [(_name(ref), way) for ref in _refs(bundle["$defs"][name])]
    return found


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        if isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/$defs/"):
            yield schema["$ref"]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _canon(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True)


class _Comparison:
    def __init__(self, way: Direction) -> None:
        self.way = way
        self.found: list[Difference] = []

    def add(self, kind: str, subject: str, what: str) -> None:
        self.found.append(Difference(kind, subject, what))

    def schema(self, old: Any, new: Any, at: str) -> None:
        if not (isinstance(old, dict) and isinstance(new, dict)):
            if old != new:
                self.add(BREAKING, at, "changed type")
            return
        if "properties" in old or "properties" in new:
            self.properties(old, new, at)
        for union in ("oneOf", "anyOf"):
            self.union(old.get(union), new.get(union), at, union)
        if "enum" in old or "enum" in new:
            self.enum(old.get("enum"), new.get("enum"), at)
        self.nested(old, new, at)
        handled = {"properties", "required", "oneOf", "anyOf", "enum", "items",
                   "additionalProperties", *_PROSE}
        for key in sorted((set(old) | set(new)) - handled):
            if _canon(old.get(key)) != _canon(new.get(key)):
                self.add(BREAKING, at, f"changed {key}: {old.get(key)!r} -> {new.get(key)!r}")

    def nested(self, old: dict[str, Any], new: dict[str, Any], at: str) -> None:
        for key in ("items", "additionalProperties"):
            if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
                self.schema(old[key], new[key], f"{at}[]")
            elif old.get(key) != new.get(key):
                self.add(BREAKING, at, f"changed {key}")

    def properties(self, old: dict[str, Any], new: dict[str, Any], at: str) -> None:
        before, after = old.get("properties", {}), new.get("properties", {})
        was, now = set(old.get("required", ())), set(new.get("required", ()))
        for field in sorted(set(before) - set(after)):
            self.add(BREAKING, f"{at}.{field}", "field removed")
        for field in sorted(set(after) - set(before)):
            if field in now and "in" in self.way:
                self.add(BREAKING, f"{at}.{field}", "new required params field")
            else:
                self.add(ADDITIVE, f"{at}.{field}", "new field")
        for field in sorted(set(before) & set(after)):
            if field in now - was and "in" in self.way:
                self.add(BREAKING, f"{at}.{field}", "params field made required")
            if field in was - now and "out" in self.way:
                self.add(BREAKING, f"{at}.{field}", "result field made optional")
            self.schema(before[field], after[field], f"{at}.{field}")

    def union(self, old: Any, new: Any, at: str, key: str) -> None:
        if old == new:
            return
        if old is None or new is None:
            self.add(BREAKING, at, f"{key} {'added' if old is None else 'removed'}")
            return
        before, after = {_canon(o): o for o in old}, {_canon(n): n for n in new}
        for gone in sorted(set(before) - set(after)):
            self.add(BREAKING, at, f"{key} member removed: {gone}")
        for added in sorted(set(after) - set(before)):
            ref = after[added].get("$ref") if isinstance(after[added], dict) else None
            # A discriminated union (``oneOf``) that only the daemon sends may grow, like
            # the event view by a new kind; any other new member changes the type.
            if key == "oneOf" and ref and "in" not in self.way:
                self.add(ADDITIVE, _name(ref), f"new member of {at}")
            else:
                self.add(BREAKING, at, f"{key} member added: {added}")

    def enum(self, old: Any, new: Any, at: str) -> None:
        if old is None or new is None:
            self.add(BREAKING, at, "enum added" if old is None else "enum removed")
            return
        for value in sorted(set(map(_canon, old)) - set(map(_canon, new))):
            self.add(BREAKING, f"{at}: {json.loads(value)}", "enum value removed")
        for value in sorted(set(map(_canon, new)) - set(map(_canon, old))):
            self.add(ADDITIVE, f"{at}: {json.loads(value)}", "new enum value")


def _tables(old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    found: list[Difference] = []
    for table in _TABLES:
        before, after = old.get(table, {}), new.get(table, {})
        found += [Difference(BREAKING, name, f"{table[:-1].replace('_', ' ')} removed")
                  for name in sorted(set(before) - set(after))]
        found += [Difference(ADDITIVE, name, f"new {table[:-1].replace('_', ' ')}")
                  for name in sorted(set(after) - set(before))]
        for name in sorted(set(before) & set(after)):
            for side in ("params", "result"):
                if before[name][side] != after[name][side]:
                    found.append(Difference(BREAKING, name, f"{side} type changed from "
                                            f"{_name(before[name][side]['$ref'])} to "
                                            f"{_name(after[name][side]['$ref'])}"))
    return found


def _keyed(old: dict[str, Any], new: dict[str, Any], what: str) -> list[Difference]:
    """Entries of a map that only grows (wire error codes): removing one breaks."""
    return ([Difference(BREAKING, key, f"{what} removed") for key in sorted(set(old) - set(new))]
            + [Difference(ADDITIVE, key, f"new {what}") for key in sorted(set(new) - set(old))])


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    """Every difference from bundle ``old`` (the pinned one) to ``new``, classified."""
    found = _tables(old, new)
    found += _keyed(old.get("wire_errors", {}), new.get("wire_errors", {}), "wire error code")
    found += _keyed(old.get("frames", {}), new.get("frames", {}), "frame")
    old_events, new_events = old.get("events", {}), new.get("events", {})
    # A new kind is reported once, as the new member of the event view union.
    found += [Difference(BREAKING, kind, "event kind removed")
              for kind in sorted(set(old_events) - set(new_events))]
    for kind in sorted(set(old_events) & set(new_events)):
        events = _Comparison(_OUT)
        events.schema(old_events[kind], new_events[kind], kind)
        found += events.found
    ways_old, ways_new = _directions(old), _directions(new)
    for name in sorted(set(old["$defs"]) & set(new["$defs"])):
        way = ways_old.get(name, frozenset()) | ways_new.get(name, frozenset()) or _BOTH
        comparison = _Comparison(way)
        comparison.schema(old["$defs"][name], new["$defs"][name], name)
        found += comparison.found
    return found
