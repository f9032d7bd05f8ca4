"""`treemail check`'s progress line: the rate, and an ETA against the default bounds' known
size (only there). Formatting and wiring only: no timing is asserted."""

from __future__ import annotations

import io
from typing import Any

import pytest

from treemail.models import command
from treemail.models.checker import DEFAULT_CONFIG, DEFAULT_STATES, eta
from treemail.models.explore import Bounds
from treemail.models.parallel import check


def test_the_eta_is_the_states_left_at_the_rate_so_far() -> None:
    # 1,000 states in 10 s: 100/s, and 1,945,064 left take 19,450.64 s.
    assert eta(1_000, 10.0, DEFAULT_STATES) == "100 states/s  ETA 5h24m (0% of 1,946,064)"
    assert eta(50, 1.0, 100) == "50 states/s  ETA 1s (50% of 100)"
    assert eta(10, 1.0, 100_000) == "10 states/s  ETA 2h46m (0% of 100,000)"
    assert eta(100, 4.0, 100) == "25 states/s  ETA 0s (100% of 100)"


def test_past_the_known_size_the_line_shows_it_rather_than_a_negative_time() -> None:
    assert eta(110, 1.0, 100) == "110 states/s  ETA 0s (110% of 100)"


def test_before_any_rate_and_at_other_bounds_it_says_so() -> None:
    assert eta(0, 0.0, 100) == "0 states/s  ETA unknown yet (0% of 100)"
    assert eta(500, 2.0, None) == "250 states/s  no ETA (non-default bounds)"


@pytest.mark.parametrize("workers", [1, 2])
def test_the_line_reaches_100_percent_when_the_size_is_right(workers: int) -> None:
    """The progress line counts visited states as the result does, in both searches: told
    the true size, its last line is at 100% with nothing left."""
    bounds = Bounds(depth=3)
    states = check(DEFAULT_CONFIG, bounds, workers=workers).states
    shown = io.StringIO()
    check(DEFAULT_CONFIG, bounds, shown, workers=workers, expected=states)
    last = shown.getvalue().rstrip().split("\r")[-1]
    assert last.endswith(f"ETA 0s (100% of {states:,})"), last


@pytest.mark.parametrize(("argv", "known"), [
    ({}, True),
    ({"workers": 2}, True),
    ({"bounds": "depth=3"}, False),
    ({"messaging": "max_hops=2"}, False),
    ({"history": True}, False),
    ({"plant": "pair-window"}, False),
])
def test_only_the_default_search_is_given_its_known_size(
        monkeypatch: pytest.MonkeyPatch, argv: dict[str, Any], known: bool) -> None:
    seen: list[int | None] = []

    class Stop(Exception):
        pass

    def fake_check(*args: Any, expected: int | None = None, **kwargs: Any) -> Any:
        seen.append(expected)
        raise Stop

    monkeypatch.setattr(command, "check", fake_check)
    with pytest.raises(Stop):
        command.main(**argv)
    assert seen == [DEFAULT_STATES if known else None]
