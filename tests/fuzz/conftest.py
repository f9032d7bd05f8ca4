"""Fuzz suites: every input ends in success or a typed error, never a traceback.

Each surface counts the inputs it tried and how each ended; the counts are printed at the
end of the run (``just fuzz`` runs the deep profile, ``just test`` the ci budget).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import settings

TALLY: defaultdict[str, Counter[str]] = defaultdict(Counter)


def budget(ci: int) -> int:
    """``ci`` examples under the ci profile, as many more under the deep one as it gives
    every other test (for surfaces whose examples each start a runtime or a server)."""
    return max(1, ci * settings().max_examples // 200)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY:
        return
    terminalreporter.section("fuzz surfaces")
    for surface, outcomes in sorted(TALLY.items()):
        tried = sum(outcomes.values())
        detail = ", ".join(f"{kind} {n}" for kind, n in sorted(outcomes.items()))
        terminalreporter.write_line(f"{surface}: {tried} inputs ({detail})")
