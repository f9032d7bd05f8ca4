"""Line (h): the model checker's speed, in states per second per core.

Four rows. The speedup: the search as it is against the same search with its two savings off
(every drain run through to the end, the reference model's own snapshot before every
operation), at bounds small enough to run both in the same run. And the target: `treemail
check` at its default bounds (a smaller depth with ``--quick``) must explore at least
1,000,000 states and reach every send guard and lifecycle transition, in under 5 minutes on 2
cores: its rate is states per second per core (per CPU second of all the workers together),
against the 1,667 that target takes.
And the pool (``parallel``): the same bounds searched by one worker per core against the
one-process search, measured one after the other: states per CPU second of all the workers
together against the one process's (the pool's overhead per core: 1x is none), and states
per wall second per core against the one process's (the wall speedup over the cores).
"""

from __future__ import annotations

import time

import attrs

from treemail.models.checker import DEFAULT_CONFIG, Checker, Result
from treemail.models.command import workers_available
from treemail.models.explore import Bounds
from treemail.models.parallel import explore

from bench.lines import Line  # isort: skip

# `treemail check` at its default bounds: this many states, every send guard and every
# lifecycle transition, in this many wall seconds on this many cores. On a shared machine the
# wall clock says how busy the others were: the line judges the CPU seconds all the workers
# took together against the cores' share of the budget.
TARGET_STATES, TARGET_SECONDS, TARGET_CORES = 1_000_000, 300.0, 2


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
    return [
        Line("h_speedup", f"(h) checker states per CPU s, depth {small.depth}",
             fast.states / fast_cpu, slow.states / slow_cpu, "/s",
             "same search, drains run through, model snapshots", "-", None),
        *_pool_lines(attrs.evolve(Bounds(), depth=6 if quick else 7)),
        _target_line(quick),
    ]


def _pool_lines(bounds: Bounds) -> list[Line]:
    """One worker per core (two at least, so that the exchange is measured) against the
    one-process search, on the same bounds, one after the other."""
    alone, alone_cpu = _timed(Checker(DEFAULT_CONFIG, bounds))
    workers = max(2, workers_available())
    pooled = explore(DEFAULT_CONFIG, bounds, workers)
    assert (pooled.states, pooled.transitions) == (alone.states, alone.transitions)
    what = f"(h) checker, {workers} workers, depth {bounds.depth}"
    return [
        Line("h_pool_cpu", f"{what}: states per CPU s", pooled.states / pooled.cpu,
             alone.states / alone_cpu, "/s", "one process, same bounds", "-", None),
        Line("h_pool_wall", f"{what}: states per s per core",
             pooled.states / pooled.seconds / workers, alone.states / alone.seconds, "/s",
             "one process, same bounds", "-", None),
    ]


def _target_line(quick: bool) -> Line:
    """`treemail check` as the command runs it: the default bounds, one worker per core."""
    bounds = attrs.evolve(Bounds(), depth=6) if quick else Bounds()
    workers = max(1, workers_available())
    full = explore(DEFAULT_CONFIG, bounds, workers)
    assert full.counterexample is None, full.counterexample
    budget = TARGET_SECONDS * TARGET_CORES  # CPU seconds
    # Every guard (`disabled` after a restart that turns messaging off) and every transition.
    met = full.states >= TARGET_STATES and full.cpu < budget and full.coverage.complete
    # The rate is states per second per core: per CPU second of all the workers together,
    # which on idle cores is the wall rate over the cores (shown beside it: on a shared
    # machine the wall clock counts the others' time too).
    what = (f"(h) check at {'depth 6' if quick else 'default bounds'}: {full.states:,} states "
            f"in {full.cpu:.0f} CPU s ({full.seconds:.0f} s wall, {workers} workers: "
            f"{full.states / full.seconds / workers:,.0f} states per wall s per core); "
            "states per s per core")
    return Line("h_check", what, full.states / full.cpu, TARGET_STATES / budget, "/s",
                f"{TARGET_STATES:,} states in {TARGET_SECONDS:.0f} s on {TARGET_CORES} cores; "
                f"{full.coverage.line()}", ">= 1x, all", None if quick else met)
