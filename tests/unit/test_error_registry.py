"""One error registry: every code a model, a user or a plugin can see is declared in the
core's modules (``treemail/core/errors.py``, ``error_registry.py``, ``refusals.py``) or in a
layer's errors module registered into it (the wire's, the daemon's, the model calls'), and
listed in ``spec/errors.json`` with its meaning."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from pathlib import Path

import treemail
from treemail import spec_tables
from treemail.core import errors, results

PACKAGE = Path(treemail.__file__).resolve().parent
# The modules that declare errors: the core's registry, and each layer's own module, which
# registers there (spec_tables imports them all).
REGISTRY = {
    PACKAGE / "core" / "error_registry.py",
    PACKAGE / "core" / "errors.py",
    PACKAGE / "core" / "refusals.py",
    PACKAGE / "protocol" / "rpc_errors.py",
    PACKAGE / "adapters" / "daemon" / "errors.py",
    PACKAGE / "adapters" / "runtime" / "model_errors.py",
    PACKAGE / "adapters" / "store" / "errors.py",
}
SPEC = PACKAGE.parent / "spec" / "errors.json"


_CODE = re.compile(r"[a-z][a-z_]*:[a-z][a-z0-9_]*")
_NAMESPACES = {cls.code.split(":")[0] for cls in spec_tables._error_classes()}


def _stray_codes(source: str) -> list[tuple[int, str]]:
    """Codes declared outside the registry: a class attribute ``code = "..."``, the
    ``"error"`` of a dict literal (a tool result built by hand), or any string that is a code
    of a registry namespace (``"rpc:overloaded"`` handed to the wire by hand)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and _CODE.fullmatch(node.value) and node.value.split(":")[0] in _NAMESPACES):
            found.append((node.lineno, node.value))
            continue
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                target = item.targets[0] if isinstance(item, ast.Assign) else (
                    item.target if isinstance(item, ast.AnnAssign) else None)
                value = getattr(item, "value", None)
                if isinstance(target, ast.Name) and target.id == "code" and isinstance(
                        value, ast.Constant) and isinstance(value.value, str):
                    found.append((item.lineno, value.value))
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (isinstance(key, ast.Constant) and key.value == "error"
                        and isinstance(value, ast.Constant) and isinstance(value.value, str)):
                    found.append((node.lineno, value.value))
    return found


def test_no_code_is_declared_outside_the_registry() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in REGISTRY and (hits := _stray_codes(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "declare error classes in the registry or a layer's errors module"


def test_the_registry_is_the_core_and_each_layer_module() -> None:
    """Each declaring module registered itself (spec_tables imported them all), and the core
    imports none of them: it names no daemon option, no wire code, no model call."""
    declared = {PACKAGE.parent.joinpath(*name.split(".")).with_suffix(".py")
                for name in errors.declaring_modules()}
    assert declared == REGISTRY
    for name in ("error_registry.py", "errors.py", "refusals.py"):
        core = (PACKAGE / "core" / name).read_text(encoding="utf-8")
        assert "--tcp" not in core and "--data-dir" not in core and "rpc:" not in core, name


def test_the_scan_finds_a_class_code_a_hand_built_result_and_a_wire_code() -> None:
    source = ('class X:\n    code = "x:y"\nr = {"error": "tool:oops", "message": "m"}\n'
              'wire(-32001, "rpc:overloaded")\nnote = "at 10:30 or ratio 3:4"\n')
    assert sorted(set(_stray_codes(source))) == [
        (2, "x:y"), (3, "tool:oops"), (4, "rpc:overloaded")]


def _all_error_classes() -> set[type[errors.TreemailError]]:
    for info in pkgutil.walk_packages(treemail.__path__, "treemail."):
        if not info.name.endswith("__main__"):  # importing that one runs the CLI
            importlib.import_module(info.name)
    found, todo = set(), [errors.TreemailError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return {cls for cls in found if cls.__module__.startswith("treemail.")}


def test_every_error_class_of_treemail_lives_in_the_registry_and_the_spec() -> None:
    classes = _all_error_classes()
    assert {c.__name__ for c in classes
            if c.__module__ not in errors.declaring_modules()} == set()
    listed = {row["code"]: row for row in json.loads(SPEC.read_text())["errors"]}
    assert {c.code for c in classes if c is not errors.TreemailError} == set(listed)
    assert all(row["meaning"] for row in listed.values())
    assert listed == {row["code"]: row for row in spec_tables.errors_table()["errors"]}


def test_the_visible_codes_once_missing_are_registered() -> None:
    listed = {row["code"] for row in json.loads(SPEC.read_text())["errors"]}
    assert {
        "permission:approval_pending", "tool:interrupted", "plugin:load_failed",
        "plugin:refused", "plugin:failed", "model:error", "model:script_exhausted",
    } <= listed


def test_one_module_gives_the_tool_result_and_the_wire_triple() -> None:
    error = errors.InboxFull("the inbox is full; wait for replies", recipient="s-2", cap=3)
    assert results.error_result(error) == {
        "error": "send_message:inbox_full", "message": "the inbox is full; wait for replies"}
    assert json.loads(results.error_text(error)) == results.error_result(error)
    assert results.triple(error) == (
        "send_message:inbox_full", "the inbox is full; wait for replies",
        {"recipient": "s-2", "cap": 3})
    odd = errors.StorageError("damaged", key=b"k", path=Path("/x"))
    assert results.triple(odd)[2] == {"key": "b'k'", "path": "/x"}
