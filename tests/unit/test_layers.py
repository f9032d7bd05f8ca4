"""The layout's arrows point down (design: ui -> daemon/runtime -> store -> core; protocol ->
core): every import in ``treemail/``, function-level ones included, read from the source."""

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
