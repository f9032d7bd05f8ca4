"""Line (h): the model checker's speed, in states per second.

Two rows. The speedup: the search as it is against the same search with its two savings off
(every drain run through to the end, the reference model's own snapshot before every
operation), at bounds small enough to run both in the same run. And the target: `treemail
check` at its default bounds (a smaller depth with ``--quick``) must explore at least
100,000 states, reach every send guard and lifecycle transition it can, in under 5 minutes.
"""

from __future__ import annotations

import attrs

from treemail.models.checker import DEFAULT_CONFIG, Checker, Result
from treemail.models.explore import Bounds

from bench.lines import Line  # isort: skip

TARGET_STATES, TARGET_SECONDS = 100_000, 300.0


def _rate(result: Result) -> float:
    return result.states / result.seconds


def checker_lines(quick: bool) -> list[Line]:
    small = attrs.evolve(Bounds(), depth=5 if quick else 6)
    fast = Checker(DEFAULT_CONFIG, small).run()
    slow = Checker(DEFAULT_CONFIG, small, shortcuts=False).run()
    assert fast.states == slow.states, "the savings must not change the states explored"
    bounds = attrs.evolve(Bounds(), depth=6) if quick else Bounds()
    full = Checker(DEFAULT_CONFIG, bounds).run()
    assert full.counterexample is None, full.counterexample
    # Only the disabled guard is out of reach: messaging is on in the checked config.
    reached = full.coverage.missing_guards() == ["disabled"] and \
        not full.coverage.missing_transitions()
    met = full.states >= TARGET_STATES and full.seconds < TARGET_SECONDS and reached
    what = f"(h) check at {'depth 6' if quick else 'default bounds'}: {full.states:,} states"
    return [
        Line("h_speedup", f"(h) checker states/s, depth {small.depth}", _rate(fast),
             _rate(slow), "/s", "same search, drains run through, model snapshots", "-",
             None),
        Line("h_check", what + f" in {full.seconds:.0f} s", _rate(full),
             TARGET_STATES / TARGET_SECONDS, "/s",
             f"100k states in 300 s; {full.coverage.line()}", ">= 1x, all", None if quick
             else met),
    ]
