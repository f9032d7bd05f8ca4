"""The core installs without its extras: with Textual and the MCP SDK refused by an import
blocker (a ``sys.meta_path`` finder in a fresh interpreter, as if they were not installed),
every module but theirs imports, and ``treemail tui`` / ``treemail mcp`` fail with
``install:extra_missing`` naming the pip command, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
"""
EXTRA_MODULES = ("treemail.adapters.ui.tui.app", "treemail.adapters.ui.tui.screens",
                 "treemail.adapters.mcp")


def _python(code: str, *blocked: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=set(blocked)) + code],
                          capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def test_the_blocker_blocks() -> None:
    done = _python("import textual", "textual")
    assert done.returncode == 1 and "No module named 'textual'" in done.stderr


def test_every_core_module_imports_without_the_extras() -> None:
    code = f"""
import importlib, pkgutil, treemail
extra = {EXTRA_MODULES!r}
names = [m.name for m in pkgutil.walk_packages(treemail.__path__, "treemail.")
         if not m.name.startswith(extra) and not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(len(names))
"""
    done = _python(code, "textual", "mcp")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 100  # the walk found the package, not nothing


def test_the_core_dependencies_name_no_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = " ".join(project["dependencies"])
    assert "textual" not in core and "mcp" not in core
    assert any(dep.startswith("textual") for dep in project["optional-dependencies"]["tui"])
    assert any(dep.startswith("textual") for dep in project["optional-dependencies"]["dev"])


@pytest.mark.parametrize(("argv", "blocked", "extra", "code"), [
    (["tui"], "textual", "tui", 2),
    (["mcp", "--http", "127.0.0.1:0"], "mcp", "mcp", 1),
])
def test_a_command_without_its_extra_names_the_pip_command(
    tmp_path: Path, argv: list[str], blocked: str, extra: str, code: int
) -> None:
    run = ("from treemail.adapters.ui.cli import main\n"
           f"raise SystemExit(main({[*argv, '--data-dir', str(tmp_path)]!r}))")
    done = _python(run, blocked, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert f"pip install 'treemail[{extra}]'" in done.stderr
    assert "[install:extra_missing]" in done.stderr
    assert f"treemail {argv[0]}: treemail {argv[0]} needs" in done.stderr
