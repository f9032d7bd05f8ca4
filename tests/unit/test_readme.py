"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

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
                 "send_message:invalid_arguments", "child: allow"):
        assert fact in section, fact
