"""`just mutate [PACKAGE]`: mutation testing of one package with mutmut, and its kill rate.

mutmut reads its settings from ``[tool.mutmut]`` in the pyproject.toml of the directory it
runs in, and judges each mutant with the tests that settings select. ``core`` (the default)
runs in the project itself, with the settings in the project's pyproject.toml. Any other
package runs in a scratch copy of the project (``mutants-PACKAGE/``, removed first) whose
pyproject.toml names that package's files and the fast tests that exercise them: mutmut
then runs only those tests, against only those mutants, and its ``mutants/`` stays apart from
the core's.

Usage: python tools/mutate/run.py [PACKAGE [MUTANT_GLOB ...]]   (PACKAGE: core, store, writer)
The globs (mutmut's mutant names, e.g. ``treemail.adapters.store.lmdb_format*``) narrow a run
to part of the package.

In a package's copy each test has a deadline (``deadline.py``): a mutant that leaves a test
waiting for ever (a stopped writer thread, a stranded batch) is a timeout within seconds
instead of mutmut's own bound of minutes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Per package: the files mutated, the tests that judge them, and the stores those tests use
# (TREEMAIL_TEST_STORES, read by tests/unit/conftest.py).
PACKAGES: dict[str, tuple[list[str], list[str], str]] = {
    "core": (["treemail/core/*"], ["tests/unit", "--ignore=tests/unit/test_spec.py"], "memory"),
    # The LMDB store: its files (layout, lock, geometry), its record format, its transactions
    # and the store itself, the codec (checksums), the durability modes and verify, judged by
    # the store contract, the store's own tests and group commit's savepoints on LMDB.
    "store": (["treemail/adapters/store/lmdb_*", "treemail/adapters/store/codec.py",
               "treemail/adapters/store/durability.py", "treemail/adapters/store/verify.py"],
              [f"tests/unit/{name}" for name in (
                  "test_store_contract.py", "test_store_files.py", "test_store_files_edges.py",
                  "test_store_format.py",
                  "test_store_format_edges.py", "test_store_edges.py", "test_codec.py",
                  "test_store_reads.py", "test_checksum_reads.py", "test_verify.py",
                  "test_verify_edges.py",
                  "test_full_disk.py", "test_durability.py", "test_group_commit.py")], "lmdb"),
    # The runtime's writer: group commit, hand-off, back-pressure, and its lanes (a call's
    # tree, ``tree_lanes``).
    "writer": (["treemail/adapters/runtime/writer.py"],
               [f"tests/unit/{name}" for name in (
                   "test_group_commit.py", "test_writer_handoff.py", "test_writer_edges.py",
                   "test_writer_lanes.py", "test_actor.py")],
               "memory,lmdb"),
}

# The pytest plugin that ends a test stuck past its deadline as a timeout (deadline.py).
DEADLINE_PLUGIN = "mutate_deadline"


def _settings(only: list[str], tests: list[str]) -> str:
    """The project's pyproject.toml with its [tool.mutmut] table pointed at one package, and
    each test bounded by ``deadline.py`` (copied beside the tests as ``mutate_deadline``)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for name, value in (("only_mutate", only),
                        ("pytest_add_cli_args_test_selection", tests),
                        ("also_copy", ["spec/", "README.md", f"{DEADLINE_PLUGIN}.py"]),
                        ("pytest_add_cli_args", ["-p", "no:cacheprovider",
                                                 "-p", DEADLINE_PLUGIN])):
        text, found = re.subn(rf"^{name} = .*$", f"{name} = {json.dumps(value)}", text,
                              count=1, flags=re.M)
        if not found:
            raise SystemExit(f"just mutate: pyproject.toml's [tool.mutmut] has no {name}")
    return text


def _workdir(package: str) -> Path:
    if package == "core":
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
        return ROOT
    only, tests, _ = PACKAGES[package]
    work = ROOT / f"mutants-{package}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    for name in ("treemail", "tests", "spec"):
        shutil.copytree(ROOT / name, work / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.lmdb", "node_modules"))
    shutil.copy(ROOT / "README.md", work / "README.md")
    shutil.copy(Path(__file__).with_name("deadline.py"), work / f"{DEADLINE_PLUGIN}.py")
    (work / "pyproject.toml").write_text(_settings(only, tests), encoding="utf-8")
    return work


def main(package: str = "core", *globs: str) -> int:
    if package not in PACKAGES:
        print(f"just mutate: no package {package!r}; choose from {', '.join(PACKAGES)}",
              file=sys.stderr)
        return 2
    mutmut = Path(sys.executable).with_name("mutmut")
    work = _workdir(package)
    env = {**os.environ, "TREEMAIL_TEST_STORES": PACKAGES[package][2]}
    start = time.monotonic()
    subprocess.run([str(mutmut), "run", "--max-children", "1", *globs], cwd=work, env=env,
                   check=True)
    subprocess.run([str(mutmut), "results"], cwd=work, env=env, check=True)
    subprocess.run([str(mutmut), "export-cicd-stats"], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    s = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8"))
    caught = s["killed"] + s["timeout"]
    print(f"{package}: mutants {s['total']}: killed {s['killed']}, timeout {s['timeout']}, "
          f"survived {s['survived']}, no tests {s['no_tests']}, suspicious {s['suspicious']}, "
          f"skipped {s['skipped']}, segfault {s['segfault']}")
    print(f"{package}: kill rate {caught / max(s['total'], 1):.1%} ((killed + timeout) / total) "
          f"in {time.monotonic() - start:.0f}s")
    expired = work / "mutants" / "deadline.log"
    if expired.exists():  # which test each deadline timeout stopped at (deadline.py)
        print(f"{package}: tests stopped at their deadline (mutant, test):")
        print(expired.read_text(encoding="utf-8"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
