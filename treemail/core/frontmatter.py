"""Reading an agent doc's YAML frontmatter, bounded, so a hostile or careless doc is refused
with an ``AgentDocError`` instead of hanging, exhausting memory or escaping as a raw error.

A frontmatter is a few plain fields, so the loader accepts exactly that: no aliases or
anchors (an alias bomb expands a few hundred bytes into gigabytes), no duplicate keys (YAML
would silently keep the last), a bounded size and nesting depth, and plain scalars only
(strings, numbers, booleans, null). A timestamp-looking value such as ``2020-02-30`` stays a
string: no field of a doc is a date, and a bad date must not escape as a ValueError.

Every refusal carries a stable ``problem`` detail beside the error's code, so a caller can
tell the cases apart without parsing the message.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from treemail.core.errors import AgentDocError

__all__ = ["MAX_DEPTH", "MAX_FRONTMATTER_CHARS", "load_frontmatter"]

# A real frontmatter is a few hundred characters and three levels deep (permissions ->
# message -> label); the bounds leave ample room and keep parsing cheap.
MAX_FRONTMATTER_CHARS: Final = 65536
MAX_DEPTH: Final = 16

# What the loader's own constructors can raise on a value they cannot build (a code point
# past U+10FFFF, an explicit ``!!float abc``, an explicit ``!!timestamp`` that is no date at
# all: AttributeError from its unmatched pattern), besides YAMLError.
_VALUE_ERRORS = (ValueError, OverflowError, TypeError, RecursionError, AttributeError)


class _Refused(Exception):
    def __init__(self, problem: str, text: str) -> None:
        super().__init__(text)
        self.problem = problem


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, refusing aliases, duplicate keys and deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _Refused("alias", f"uses a YAML alias (line {mark.line + 1}); aliases and "
                           "anchors are not allowed in a frontmatter, write the value out")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused("too_deep", f"nests deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise _Refused("bad_key", f"has a key that is not a plain value (line "
                               f"{key_node.start_mark.line + 1})") from None
            if duplicate:
                raise _Refused("duplicate_key", f"defines {key!r} twice (line "
                               f"{key_node.start_mark.line + 1}); keep one")
        return dict(super().construct_mapping(node, deep=deep))


# Dates stay strings: drop the timestamp resolver from this loader only.
_BoundedLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_frontmatter(text: str, source: str) -> object:
    """The frontmatter's value, or ``AgentDocError`` naming ``source`` and the problem."""
    if len(text) > MAX_FRONTMATTER_CHARS:
        raise _error(source, "too_large", f"is {len(text)} characters long; the limit is "
                     f"{MAX_FRONTMATTER_CHARS}")
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader already refuses control characters
        return loader.get_single_data()
    except _Refused as exc:
        raise _error(source, exc.problem, str(exc)) from None
    except yaml.YAMLError as exc:
        raise _error(source, "yaml_syntax", f"is not valid YAML: {exc}") from exc
    except _VALUE_ERRORS as exc:
        raise _error(source, "bad_value", f"holds a value YAML cannot read: {exc}") from exc
    finally:
        if loader is not None:
            loader.dispose()


def _error(source: str, problem: str, text: str) -> AgentDocError:
    return AgentDocError(f"{source}: frontmatter {text}", source=source, field="frontmatter",
                         problem=problem)
