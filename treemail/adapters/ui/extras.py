"""The commands whose packages install as extras: ``treemail tui`` (Textual, ``treemail[tui]``)
and ``treemail mcp`` (the MCP SDK, ``treemail[mcp]``). The core installs without them; such a
command, run without its extra, fails with ``ExtraMissing`` naming the pip command, never with
an ImportError's traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from treemail.core.errors import ExtraMissing

__all__ = ["EXTRAS", "load"]

# extra -> (the top-level packages it installs, what they are)
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "tui": (("textual",), "Textual"),
    "mcp": (("mcp", "pydantic", "starlette", "uvicorn", "anyio"), "the MCP SDK"),
}


def load(module: str, extra: str, command: str) -> ModuleType:
    """Import treemail's ``module``, which needs ``extra``; ``ExtraMissing`` when a package
    of that extra is not installed. Any other ImportError is a bug and is raised as it is."""
    packages, what = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in packages:
            raise
        raise ExtraMissing(
            f"treemail {command} needs {what}, which is not installed ({exc.name} is "
            f"missing); install it with: pip install 'treemail[{extra}]'",
            extra=extra, package=missing) from None
