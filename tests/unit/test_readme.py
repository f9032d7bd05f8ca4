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
