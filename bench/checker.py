"""Line (h): the model checker's speed, in states per second.

Two rows. The speedup: the search as it is against the same search with its two savings off
(every drain run through to the end, the reference model's own snapshot before every
operation), at bounds small enough to run both in the same run. And the target: `treemail
check` at its default bounds (a smaller depth with ``--quick``) must explore at least
100,000 states and reach every send guard and lifecycle transition, in under 5 minutes.
"""

from __future__ import annotations

import time

import attrs

from treemail.models.checker import DEFAULT_CONFIG, Checker, Result
from treemail.models.explore import Bounds

from bench.lines import Line  # isort: skip

TARGET_STATES, TARGET_SECONDS = 100_000, 300.0


def _timed(checker: Checker) -> tuple[Result, float]:
    """The result and the process CPU seconds it took: on a shared machine CPU time is what
    compares between runs; the wall time is in the result."""
    start = time.process_time()
    result = checker.run()
    return result, time.process_time() - start


def checker_lines(quick: bool) -> list[Line]:
    small = attrs.evolve(Bounds(), depth=5 if quick else 6)
    fast, fast_cpu = _timed(Checker(DEFAULT_CONFIG, small))
    slow, slow_cpu = _timed(Checker(DEFAULT_CONFIG, small, shortcuts=False))
    assert fast.states == slow.states, "the savings must not change the states explored"
    bounds = attrs.evolve(Bounds(), depth=6) if quick else Bounds()
    full, full_cpu = _timed(Checker(DEFAULT_CONFIG, bounds))
    assert full.counterexample is None, full.counterexample
    # Every guard (`disabled` after a restart that turns messaging off) and every transition.
    met = full.states >= TARGET_STATES and full_cpu < TARGET_SECONDS and full.coverage.complete
    what = f"(h) check at {'depth 6' if quick else 'default bounds'}: {full.states:,} states"
    return [
        Line("h_speedup", f"(h) checker states per CPU s, depth {small.depth}",
             fast.states / fast_cpu, slow.states / slow_cpu, "/s",
             "same search, drains run through, model snapshots", "-", None),
        Line("h_check", what + f" in {full_cpu:.0f} CPU s ({full.seconds:.0f} s wall)",
             full.states / full_cpu,
             TARGET_STATES / TARGET_SECONDS, "/s",
             f"100k states in 300 s; {full.coverage.line()}", ">= 1x, all", None if quick
             else met),
    ]
