"""Writing and checking ``spec/bindings/`` (``just write-bindings``, ``just check-bindings``).

``check`` regenerates every binding into a temporary directory, compares it file by file
with the committed one, and fails on any difference, naming the command that rewrites them.
It also holds the wire to its pinned version: ``pinned/protocol-<N>.schema.json`` is the
bundle of protocol N as released, and every difference from it is classified
(``treemail.protocol.compat``). A breaking one fails unless ``PROTOCOL_VERSION`` is bumped
(or it is one of the few ``TIGHTENED`` within the version, each with its reason); an additive
one passes once the protocol changelog (``spec/protocol-changelog.md``) names it under the
version's heading, as a tightened one must too. ``write`` pins a version that has no snapshot
yet, and refuses to re-pin one unless told ``--amend`` (for a version not yet released).
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

# Every layer's errors module, so that the error codes of the bindings are the whole registry.
from treemail.adapters.daemon import errors as _daemon_errors  # noqa: F401
from treemail.adapters.runtime import model_errors as _model_errors  # noqa: F401
from treemail.adapters.store import errors as _store_errors  # noqa: F401
from treemail.protocol.bindings import dump, generate, schema_bundle
from treemail.protocol.compat import ADDITIVE, BREAKING, Difference, compare
from treemail.protocol.methods import PROTOCOL_VERSION

__all__ = ["CHANGELOG", "TIGHTENED", "check", "classified", "main", "pinned_path", "write"]

DEFAULT_DIR = Path("spec/bindings")
CHANGELOG = "protocol-changelog.md"  # beside the bindings' directory
REWRITE = "just write-bindings"

# Constraints added within the version on purpose, though compat calls any new constraint on
# what a client sends breaking: each one writes into the schema a rule the pinned version
# already documented, so a client that kept to the documentation still works. Keyed by the
# difference (subject, what), each with why (tests/unit/test_bindings.py fails on a key that
# is no longer a difference, so the list stays exact).
TIGHTENED: Final[Mapping[tuple[str, str], str]] = {
    ("EventsReadParams.limit", "changed minimum: None -> 1"):
        "events.read's limit was documented as at most 256 events; the daemon clamped a "
        "limit out of 1 to 256 and now refuses it, as the other pages do",
    ("EventsReadParams.limit", "changed maximum: None -> 256"):
        "the same bound's other side",
}


def _breaking(found: Sequence[Difference]) -> list[Difference]:
    return [d for d in found if d.kind == BREAKING and (d.subject, d.what) not in TIGHTENED]


def pinned_path(directory: Path, version: int = PROTOCOL_VERSION) -> Path:
    return directory / "pinned" / f"protocol-{version}.schema.json"


def _pinned(directory: Path) -> dict[str, Any] | None:
    path = pinned_path(directory)
    pinned: dict[str, Any] | None = (json.loads(path.read_text(encoding="utf-8"))
                                     if path.exists() else None)
    return pinned


def classified(directory: Path) -> list[Difference] | None:
    """Every difference of the wire types from the pinned bundle; None when none is pinned."""
    pinned = _pinned(directory)
    return None if pinned is None else compare(pinned, schema_bundle())


def changelog_entries(directory: Path) -> str:
    """The changelog's section of ``PROTOCOL_VERSION``: from its heading to the next."""
    path = directory.parent / CHANGELOG
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    found = re.search(rf"^## Protocol {PROTOCOL_VERSION}\b.*?(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    return found.group(0) if found else ""


def version_problems(directory: Path) -> list[str]:
    """Why the wire types do not fit ``PROTOCOL_VERSION`` as pinned."""
    found = classified(directory)
    if found is None:
        return [f"protocol version {PROTOCOL_VERSION} has no pinned snapshot "
                f"{pinned_path(directory)}; run `{REWRITE}` to pin it"]
    problems = [f"{d} (a breaking change: bump PROTOCOL_VERSION in "
                f"treemail/protocol/methods.py, then run `{REWRITE}`; or `{REWRITE} --amend` "
                f"while protocol {PROTOCOL_VERSION} is unreleased)" for d in _breaking(found)]
    listed = changelog_entries(directory)
    to_list = [d for d in found if d.kind == ADDITIVE or (d.subject, d.what) in TIGHTENED]
    problems += [f"{d} is not in the protocol changelog: name `{d.subject}` under "
                 f"'## Protocol {PROTOCOL_VERSION}' in {directory.parent / CHANGELOG}"
                 for d in to_list if f"`{d.subject}`" not in listed]
    return problems


def differences(directory: Path) -> list[str]:
    """Each committed binding that differs from a fresh generation, with a diff."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="treemail-bindings-") as tmp:
        for name, text in generate().items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
            fresh = (Path(tmp) / name).read_text(encoding="utf-8")
            committed = directory / name
            if not committed.exists():
                problems.append(f"{committed} is missing")
                continue
            old = committed.read_text(encoding="utf-8")
            if old != fresh:
                diff = difflib.unified_diff(old.splitlines(), fresh.splitlines(),
                                            f"{committed} (committed)", "generated", lineterm="")
                problems.append("\n".join(list(diff)[:40]))
    return problems


def check(directory: Path = DEFAULT_DIR) -> list[str]:
    problems = version_problems(directory)
    found = differences(directory)
    if found:
        problems.append(f"spec/bindings is out of date; run `{REWRITE}` to rewrite it")
        problems += found
    return problems


def write(directory: Path = DEFAULT_DIR, *, amend: bool = False) -> str | None:
    """Rewrite the bindings, pinning the version if it is not yet; an error message if a
    breaking change must not be written under the pinned version."""
    found = classified(directory)
    breaking = [str(d) for d in _breaking(found or [])]
    if breaking and not amend:
        return ("the wire types break protocol " f"{PROTOCOL_VERSION} as pinned:\n  "
                + "\n  ".join(breaking) + "\nbump PROTOCOL_VERSION in "
                "treemail/protocol/methods.py (or pass --amend while this version is "
                "unreleased)")
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (directory / name).write_text(text, encoding="utf-8")
    if found is None or amend:
        pinned_path(directory).parent.mkdir(parents=True, exist_ok=True)
        pinned_path(directory).write_text(dump(schema_bundle()), encoding="utf-8")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("check", "write"):
        print("usage: python -m treemail.adapters.daemon.bindings check|write [--amend] [DIR]",
              file=sys.stderr)
        return 2
    rest = [a for a in args[1:] if a != "--amend"]
    directory = Path(rest[0]) if rest else DEFAULT_DIR
    if args[0] == "write":
        refused = write(directory, amend="--amend" in args)
        if refused:
            print(f"write-bindings: {refused}", file=sys.stderr)
            return 1
        print(f"wrote {directory}")
        return 0
    problems = check(directory)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
