"""The model checker over a pool of processes finds what the one-process search finds: the
same states, transitions, drains, outcomes and coverage, and the same first shortest
counterexample for every planted bug."""

from __future__ import annotations

import gc

import attrs
import pytest

from tests.property.test_checker import CHECKER_HUNTED, SMALL, WINDOWED
from treemail.adapters.ui.cli import main
from treemail.models import balance
from treemail.models.checker import Result
from treemail.models.explore import Bounds
from treemail.models.parallel import check, explore, owner
from treemail.models.plants import planted

# Depth-capped at 5 with the default sizes: 1,596 states, every kind of action (the external
# boundary's too), and 1,352 at the cap (drained, not expanded), so the drains' chaining is
# in play.
CAPPED = attrs.evolve(Bounds(), depth=5)


def _counts(result: Result) -> tuple[object, ...]:
    return (result.states, result.transitions, result.drain_steps, result.drained,
            result.pruned, result.capped, result.depth, result.outcomes,
            result.coverage.guards, result.coverage.transitions)


@pytest.mark.parametrize("bounds", [CAPPED, SMALL], ids=["capped", "exhausted"])
def test_any_number_of_workers_explores_the_same_states(bounds: Bounds) -> None:
    alone = check(WINDOWED, bounds)
    assert alone.counterexample is None and alone.states > 300
    for workers in (1, 2, 3):
        pooled = explore(WINDOWED, bounds, workers)
        assert pooled.counterexample is None
        assert _counts(pooled) == _counts(alone), workers


def test_a_search_in_this_process_leaves_its_collector_as_it_was() -> None:
    """One worker searches in the caller's process, freezing its heap level by level: the
    collector's thresholds and frozen objects are the caller's again afterwards."""
    before = gc.get_threshold(), gc.get_freeze_count()
    explore(WINDOWED, CAPPED, 1)
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_the_states_are_spread_over_the_workers() -> None:
    """Keys are digests: an owner by hash gives each worker a share of them."""
    keys = [bytes([i, i * 7 % 256, 3, 4, 5, 6, 7, i % 5]) for i in range(256)]
    shares = [sum(owner(key, 3) == index for key in keys) for index in range(3)]
    assert all(share > 40 for share in shares), shares


def _after(places: list[list[tuple[int, ...]]], window: int) -> list[list[tuple[int, ...]]]:
    """Each worker's places once ``moves`` is carried out."""
    given, _ = balance.plan(places, window)
    kept = [[place for at, place in enumerate(mine)
             if not any(at in ats for ats in given[by].values())]
            for by, mine in enumerate(places)]
    for by, mine in enumerate(given):
        assert by not in mine  # nobody gives to itself
        for to, ats in mine.items():
            kept[to] += [places[by][at] for at in ats]
    return [sorted(mine) for mine in kept]


@pytest.mark.parametrize("sizes", [[10, 0, 2], [0, 7], [3, 3, 3], [1, 0, 0], [0, 0], [9, 1, 1, 1]])
def test_the_frontiers_are_evened_out_by_moving_the_surplus(sizes: list[int]) -> None:
    """Generators keep their winners, so one worker may hold most of the next frontier (the
    root's, at first): the surplus moves, and only the surplus, until each holds its share."""
    places: list[list[tuple[int, ...]]] = [[(by, at) for at in range(size)]
                                           for by, size in enumerate(sizes)]
    after = [len(mine) for mine in _after(places, 100)]
    assert sum(after) == sum(sizes) and max(after) - min(after) <= 1, (sizes, after)
    floor = sum(sizes) // len(sizes)  # no worker gives away more than it holds above it
    given, _ = balance.plan(places, 100)
    assert all(sum(map(len, given[by].values())) <= max(0, size - floor)
               for by, size in enumerate(sizes))


def test_each_window_of_the_order_is_shared_out_not_only_the_sizes() -> None:
    """Two frontiers of one size, one early in the order and one late (a worker whose early
    states win the early duplicates level after level): each chunk-sized window of the order
    ends up shared between them, so no chunk keeps a worker waiting."""
    early: list[tuple[int, ...]] = [(0, at) for at in range(40)]
    late: list[tuple[int, ...]] = [(1, at) for at in range(40)]
    after = _after([early, late], 4)
    for start in range(0, 80, 8):
        window = sorted(early + late)[start:start + 8]
        assert [len(set(mine) & set(window)) for mine in after] == [4, 4], start
    assert balance.plan([early, late], 4)[1] == sorted(early + late)[8::8]
    # Frontiers already interleaved in the order move nothing.
    evens: list[tuple[int, ...]] = [(at,) for at in range(0, 80, 2)]
    odds: list[tuple[int, ...]] = [(at,) for at in range(1, 80, 2)]
    assert balance.plan([evens, odds], 4)[0] == [{}, {}]


@pytest.mark.parametrize("plant", ["pair-window", "recover-keeps-claims", "discard-claimed",
                                   *sorted(CHECKER_HUNTED)])
def test_a_planted_bug_gets_the_same_counterexample_from_two_workers(plant: str) -> None:
    bounds = CHECKER_HUNTED[plant][0] if plant in CHECKER_HUNTED else SMALL
    with planted(plant):
        alone = check(WINDOWED, bounds).counterexample
        pooled = check(WINDOWED, bounds, workers=2).counterexample
    assert alone is not None and alone.invariant in ("AGREE", "INV7", "INV1"), plant
    assert pooled == alone


def test_the_command_takes_workers(capsys: pytest.CaptureFixture[str]) -> None:
    bounds = "sessions=2,messages=2,restarts=1,depth=4,disabled=0,trees=1"
    assert main(["check", "--quiet", "--workers", "2", "--bounds", bounds]) == 0
    out = capsys.readouterr().out
    assert "2 worker processes" in out and "no counterexample" in out
    assert main(["check", "--quiet", "--workers", "0", "--bounds", bounds]) == 2
    assert "--workers: must be at least 1" in capsys.readouterr().err
    assert main(["check", "--quiet", "--workers", "2", "--plant", "pair-window",
                 "--bounds", bounds.replace("depth=4", "depth=5")]) == 1
