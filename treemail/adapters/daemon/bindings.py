"""Writing and checking ``spec/bindings/`` (``just write-bindings``, ``just check-bindings``).

``check`` regenerates every binding into a temporary directory, compares it file by file
with the committed one, and fails on any difference, naming the command that rewrites them.
It also fails when the wire types changed but ``PROTOCOL_VERSION`` did not: the fingerprint
of the schemas is pinned per version in ``fingerprints.json``, and ``write`` refuses to
re-pin a version that already has one unless told ``--amend`` (for a version not yet
released).
"""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from treemail.protocol.bindings import fingerprint, generate, schema_bundle
from treemail.protocol.methods import PROTOCOL_VERSION

__all__ = ["FINGERPRINTS", "check", "main", "write"]

DEFAULT_DIR = Path("spec/bindings")
FINGERPRINTS = "fingerprints.json"
REWRITE = "just write-bindings"


def _pins(directory: Path) -> dict[str, str]:
    path = directory / FINGERPRINTS
    pins = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return {str(k): str(v) for k, v in pins.items()}


def version_problem(directory: Path) -> str | None:
    """Why the pinned fingerprint does not fit the wire types of ``PROTOCOL_VERSION``."""
    current, version = fingerprint(schema_bundle()), str(PROTOCOL_VERSION)
    pinned = _pins(directory).get(version)
    if pinned is None:
        return (f"protocol version {version} has no pinned fingerprint in "
                f"{directory / FINGERPRINTS}; run `{REWRITE}` to pin it")
    if pinned != current:
        return (f"the wire types changed but PROTOCOL_VERSION is still {version} (pinned "
                f"fingerprint {pinned[:12]}, now {current[:12]}): bump PROTOCOL_VERSION in "
                f"treemail/protocol/methods.py, then run `{REWRITE}`")
    return None


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
    problems = [p for p in [version_problem(directory)] if p]
    found = differences(directory)
    if found:
        problems.append(f"spec/bindings is out of date; run `{REWRITE}` to rewrite it")
        problems += found
    return problems


def write(directory: Path = DEFAULT_DIR, *, amend: bool = False) -> str | None:
    """Rewrite the bindings and pin the fingerprint; an error message if it must not."""
    problem = version_problem(directory)
    pins = _pins(directory)
    if problem is not None and str(PROTOCOL_VERSION) in pins and not amend:
        return problem + " (or pass --amend while this version is unreleased)"
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (directory / name).write_text(text, encoding="utf-8")
    pins[str(PROTOCOL_VERSION)] = fingerprint(schema_bundle())
    (directory / FINGERPRINTS).write_text(json.dumps(pins, indent=2, sort_keys=True) + "\n",
                                          encoding="utf-8")
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
