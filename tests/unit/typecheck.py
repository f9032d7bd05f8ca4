"""Run mypy, as ``just lint`` does, over small snippets: the proof that a vocabulary is typed
is a misspelling mypy refuses beside the correct spelling it accepts."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mypy_errors(tmp_path: Path, snippets: Mapping[str, str]) -> dict[str, list[str]]:
    """The mypy errors of each snippet (by name), checked in one mypy run under the project's
    settings; a snippet mypy accepts maps to []."""
    files = {}
    for name, source in snippets.items():
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / ".mypy_cache"), "--no-error-summary",
         *map(str, files.values())],
        capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mypy crashed:\n{done.stdout}{done.stderr}")
    found: dict[str, list[str]] = {name: [] for name in snippets}
    for line in done.stdout.splitlines():
        for name, path in files.items():
            if line.startswith(str(path)) and re.search(r": error: ", line):
                found[name].append(line.removeprefix(str(path)))
    return found
