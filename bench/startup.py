"""Line (l): how soon a client command answers a person: ``treemail --version`` and
``treemail sessions --help`` start to exit, each the median of fresh interpreters, against
``python -c pass`` started the same way in the same run (the interpreter's own start, which
no change to treemail can go below)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from bench.lines import Line

__all__ = ["startup_lines"]

# The start a person does not notice: a client command that takes longer feels slow.
TARGET = 0.3  # seconds


def _median(argv: list[str], runs: int) -> float:
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        took.append(time.perf_counter() - start)
    return statistics.median(took)


def startup_lines(quick: bool) -> list[Line]:
    runs = 10 if quick else 30
    bare = _median(["-c", "pass"], runs)
    rows = []
    for name, argv in (("version", ["--version"]), ("help", ["sessions", "--help"])):
        took = _median(["-m", "treemail", *argv], runs)
        rows.append(Line(f"l_start_{name}", f"(l) start: treemail {' '.join(argv)}",
                         took * 1e3, bare * 1e3, "ms", "python -c pass", f"<{TARGET * 1e3:.0f} ms",
                         took < TARGET))
    return rows
