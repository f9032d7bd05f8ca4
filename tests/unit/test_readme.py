"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from treemail.core.errors import InvalidArguments

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "the README lost its embedding example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})


def test_readme_agent_doc_example_parses() -> None:
    from treemail.core.agents import parse_agent_doc

    [doc] = re.findall(r"```markdown\n(.*?)```", README.read_text(), flags=re.DOTALL)
    parsed = parse_agent_doc(doc, "README.md")
    assert parsed.spec.rules.visible and parsed.spec.name == "explore"


def test_readme_records_the_single_messaging_tool() -> None:
    text = README.read_text()
    section = text.split("## Coming from a dedicated steering tool", 1)[1].split("\n## ", 1)[0]
    for fact in ("steer_subagent", 'mode="steer"', "recipient_session_id",
                 InvalidArguments.code, "child: allow"):
        assert fact in section, fact


def _migration_section(text: str) -> str:
    return text.split("## Coming from a dedicated steering tool", 1)[1].split("\n## ", 1)[0]


def test_no_prompt_tool_text_or_guide_mentions_the_removed_tool() -> None:
    """The removed steering tool lives on only in the migration notes: nothing a model reads
    (built-in agents, tool definitions) and no guide (spec/, docs/) still offers it."""
    from treemail.core.agents import BUILTIN_AGENTS
    from treemail.core.tools import TOOL_NAMES, tool_definitions

    root = README.parent
    readme = README.read_text()
    texts = {"README.md (outside the migration notes)": readme.replace(
        _migration_section(readme), "")}
    texts.update({f"agent {name}": f"{spec.name} {spec.description}"
                  for name, spec in BUILTIN_AGENTS.items()})
    texts["tool definitions"] = repr(tool_definitions(TOOL_NAMES))
    guides = [*root.glob("spec/*.md"), *root.glob("docs/*.md"), *root.glob("CONTRIBUTING.md")]
    assert any(path.name == "README.md" for path in guides), "spec/README.md went missing"
    texts.update({str(path.relative_to(root)): path.read_text() for path in guides})
    stale = sorted(where for where, text in texts.items() if "steer_subagent" in text)
    assert not stale, stale


def test_the_migration_notes_record_the_breaking_changes() -> None:
    """Deny by default costs the built-in agents their out-of-box steering, and grants made
    under the old argument shape do not carry over: both are written down for users."""
    section = " ".join(_migration_section(README.read_text()).split())
    for fact in ("the built-in agents ship without it", "breaking change", "do not carry over"):
        assert fact in section, fact
