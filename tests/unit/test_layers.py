"""The layout's arrows point down (design: ui -> daemon/runtime -> store -> core; protocol ->
core): every import in ``treemail/``, function-level ones included, read from the source; and
no module reaches itself through its imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "treemail"

# Each layer and the layers it may import (itself included). The top-level modules (the
# package's facade, ``__main__``, the client re-export, the spec tables) may import any.
# ``testing`` (the store contract, a throwaway PostgreSQL) tests a store through the core's
# port alone, so that it fits any backend.
MAY_IMPORT: dict[str, set[str]] = {
    "core": {"core"},
    "protocol": {"core", "protocol"},
    "models": {"core", "models"},
    "adapters.store": {"core", "adapters.store"},
    "testing": {"core", "testing"},
    "adapters.runtime": {"core", "adapters.store", "adapters.runtime"},
    "adapters.daemon": {"core", "protocol", "adapters.store", "adapters.runtime",
                        "adapters.daemon"},
    "adapters.mcp": {"core", "protocol", "adapters.daemon", "adapters.mcp"},
    "adapters.ui": {"core", "protocol", "models", "adapters.store", "adapters.runtime",
                    "adapters.daemon", "adapters.mcp", "adapters.ui"},
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name under ``treemail``; None for the top level."""
    parts = module.split(".")[1:]
    if parts[:1] == ["adapters"] and len(parts) > 1:
        return "adapters." + parts[1]
    return parts[0] if len(parts) > 1 and parts[0] in MAY_IMPORT else None


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("treemail.")}


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        dotted = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out.append((dotted.removesuffix(".__init__"), path))
    return out


def test_every_adapter_module_sits_in_a_wing() -> None:
    loose = [m for m, _ in modules() if m.startswith("treemail.adapters.")
             and layer_of(m) not in MAY_IMPORT]
    assert loose == []


@pytest.mark.parametrize("module,path", [pytest.param(m, p, id=m) for m, p in modules()])
def test_imports_point_down(module: str, path: Path) -> None:
    layer = layer_of(module)
    if layer is None:
        return  # the top level may import any layer
    allowed = MAY_IMPORT[layer]
    upward = sorted(name for name in imports_of(path)
                    if (target := layer_of(name)) is not None and target not in allowed)
    assert upward == [], f"{module} ({layer}) imports above its layer: {upward}"


def import_graph() -> dict[str, list[str]]:
    """Each module's imports of other treemail modules, function-level and type-only ones
    included: a local import hides a cycle from Python, not from the design. Packages'
    ``__init__`` are left out (``from treemail.core import keys`` names the package on the
    way to ``keys``)."""
    paths = dict(modules())
    packages = {m for m, p in paths.items() if p.name == "__init__.py"}
    return {m: sorted(n for n in imports_of(p) if n in paths and n not in packages and n != m)
            for m, p in paths.items() if m not in packages}


def import_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Every cycle through each module of ``graph``, found depth first."""
    cycles, done = [], set()
    for start in graph:
        path, stack = [start], [iter(graph[start])]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                path.pop()
            elif step == start:
                cycles.append([*path, start])
            elif step not in path and step not in done:
                path.append(step)
                stack.append(iter(graph[step]))
        done.add(start)
    return cycles


def test_no_module_imports_itself_through_others() -> None:
    assert import_cycles(import_graph()) == []


def test_the_cycle_check_sees_a_cycle_hidden_in_a_function() -> None:
    assert import_cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [
        ["a", "b", "c", "a"]]
    assert "treemail.adapters.ui.feed" in import_graph()["treemail.adapters.ui.demo_connect"]
