"""Agent docs: Markdown with a YAML frontmatter naming the agent and its message rules.

```
---
name: explore
description: Reads code and reports
model: scripted
receipts: true
permissions:
  message:
    parent: allow
    sibling: ask
---
The system prompt follows the frontmatter.
```

Built-in agents ship without message rules, so deny-by-default hides send_message from them
until a user's doc adds a rule. Parsing is pure; the caller reads the file.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

import attrs

from treemail.core.errors import AgentDocError
from treemail.core.frontmatter import load_frontmatter
from treemail.core.permissions import LABELS, Action, Rules
from treemail.core.records import AgentSpec

__all__ = ["BUILTIN_AGENTS", "AgentDoc", "parse_agent_doc"]

_FIELDS = frozenset({"name", "description", "model", "permissions", "messaging_prompt",
                     "receipts"})
_PERMISSION_ACTIONS = frozenset({"message", "delegate"})


@attrs.frozen
class AgentDoc:
    spec: AgentSpec
    model: str | None
    prompt: str
    source: str
    # The messaging section's template (``treemail.core.prompts``): None for the default,
    # "" for none (``messaging_prompt: false``).
    messaging: str | None = None


def parse_agent_doc(text: str, source: str = "<agent doc>") -> AgentDoc:
    """Parse an agent doc; any malformed part raises ``AgentDocError`` naming source and field."""
    frontmatter, prompt = _split(text, source)
    meta = load_frontmatter(frontmatter, source)
    if not isinstance(meta, Mapping):
        raise _field_error(source, "frontmatter", "must be a mapping of fields", "not_mapping")
    unknown = sorted(str(key) for key in meta if key not in _FIELDS)
    if unknown:
        raise _field_error(source, unknown[0],
                           f"is not a known field; expected {', '.join(sorted(_FIELDS))}",
                           "unknown_field")
    name = _text(meta, "name", source, required=True)
    assert name is not None
    if not name.replace("-", "").replace("_", "").isalnum():
        raise _field_error(source, "name", "must be letters, digits, '-' or '_'", "bad_name")
    permissions = _permissions(meta.get("permissions"), source)
    spec = AgentSpec(
        name=name,
        description=_text(meta, "description", source) or "",
        rules=_message_rules(permissions, source),
        delegate_rules=_delegate_rules(permissions, source),
        receipts=_flag(meta, "receipts", source),
    )
    return AgentDoc(spec=spec, model=_text(meta, "model", source), prompt=prompt.strip(),
                    source=source, messaging=_messaging(meta, source))


def _messaging(meta: Mapping[object, object], source: str) -> str | None:
    """``messaging_prompt``: a template for the messaging section, or false for none."""
    if meta.get("messaging_prompt") is False:
        return ""
    try:
        return _text(meta, "messaging_prompt", source)
    except AgentDocError:
        raise _field_error(source, "messaging_prompt", "must be a non-empty string (a "
                           "template; {handle} is the session's handle) or false (no "
                           "messaging section)", "bad_text") from None


def _flag(meta: Mapping[object, object], field: str, source: str) -> bool:
    """An opt-in switch: absent is off; anything but true or false is refused."""
    value = meta.get(field, False)
    if not isinstance(value, bool):
        raise _field_error(source, field, "must be true or false", "bad_flag")
    return value


def _split(text: str, source: str) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise _field_error(source, "frontmatter", "must open the file with a '---' line",
                           "no_frontmatter")
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1:])
    raise _field_error(source, "frontmatter", "has no closing '---' line",
                       "unclosed_frontmatter")


def _text(meta: Mapping[object, object], field: str, source: str,
          required: bool = False) -> str | None:
    value = meta.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _field_error(source, field, "must be a non-empty string", "bad_text")
    return value.strip()


def _permissions(permissions: object, source: str) -> Mapping[object, object]:
    if permissions is None:
        return {}
    if not isinstance(permissions, Mapping):
        raise _field_error(source, "permissions", "must be a mapping of action to rules",
                           "bad_permissions")
    unknown = sorted(str(key) for key in permissions if key not in _PERMISSION_ACTIONS)
    if unknown:
        raise _field_error(source, f"permissions.{unknown[0]}", "is not a known action",
                           "unknown_action")
    return permissions


def _action_rules(
    permissions: Mapping[object, object], action: str, source: str
) -> Mapping[object, object] | None:
    rules = permissions.get(action)
    if rules is not None and not isinstance(rules, Mapping):
        shape = "label to allow|ask|deny" if action == "message" else "agent name to allow|deny"
        raise _field_error(source, f"permissions.{action}", f"must be a mapping of {shape}",
                           "bad_rules")
    return rules


def _message_rules(permissions: Mapping[object, object], source: str) -> Rules:
    """``permissions.message``; a label that names no relationship is refused, since a rule
    that can never match (``Child: allow``) would show the tool and deny every send."""
    rules = Rules.parse(_action_rules(permissions, "message", source), source)
    for rule in rules.rules:
        if not any(rule.matches(label) for label in LABELS):
            close = difflib.get_close_matches(rule.pattern.casefold(), LABELS[:3], n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise AgentDocError(
                f"{source}: permissions.message.{rule.pattern} is not a relationship label "
                f"and matches none; {hint}the labels are parent, child, sibling or *",
                source=source, field=f"permissions.message.{rule.pattern}",
                problem="unknown_label")
    return rules


def _delegate_rules(permissions: Mapping[object, object], source: str) -> Rules | None:
    """``permissions.delegate``: agent-name patterns to allow or deny (no ``ask``: a
    delegation has no approval flow). Absent means the agent may delegate to any agent."""
    table = _action_rules(permissions, "delegate", source)
    if table is None:
        return None
    rules = Rules.parse(table, source)
    for rule in rules.rules:
        if rule.action is Action.ASK:
            raise _field_error(source, f"permissions.delegate.{rule.pattern}",
                               "must be allow or deny: delegation has no approval flow",
                               "ask_not_allowed")
    return rules


def _field_error(source: str, field: str, text: str, problem: str) -> AgentDocError:
    return AgentDocError(f"{source}: {field} {text}", source=source, field=field,
                         problem=problem)


# No message rules: deny by default, and the tool stays hidden until a user adds one.
BUILTIN_AGENTS: Mapping[str, AgentSpec] = {
    "default": AgentSpec("default", "General-purpose agent that can delegate subagents"),
    "explore": AgentSpec("explore", "Explores code and reports findings to its parent"),
}
