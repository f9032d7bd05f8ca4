"""``treemail check``: its arguments, and the report of a search (``checker``)."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

import attrs

from treemail.core.config import MessagingConfig
from treemail.core.errors import TreemailError
from treemail.models.checker import DEFAULT_CONFIG, DEFAULT_STATES, INVARIANTS, Result
from treemail.models.explore import Bounds
from treemail.models.parallel import check
from treemail.models.plants import PLANTS, planted
from treemail.models.replay import StoreFactory

__all__ = ["load_config", "main", "parse_bounds", "report", "workers_available"]


def report(result: Result, out: TextIO | None = None) -> None:
    out = out if out is not None else sys.stdout  # looked up late: tests capture it
    print(f"explored {result.states} states, {result.transitions} transitions "
          f"(+{result.drain_steps} drain steps in {result.drained} drains run through; "
          f"{result.pruned} successors beyond the size "
          f"bounds checked, not explored), depth {result.depth}, {result.seconds:.1f} s "
          f"({result.cpu:.1f} CPU s)",
          file=out)
    print(f"coverage: {result.coverage.line()}", file=out)
    if result.capped:
        print(f"depth cap reached: {result.capped} states at depth {result.depth} were drained "
              "but not expanded", file=out)
    elif result.counterexample is None:
        print("exhausted: every reachable state within the size bounds was expanded", file=out)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items()))
    print(f"outcomes: {outcomes}", file=out)
    found = result.counterexample
    if found is None:
        print("no counterexample: " + ", ".join(INVARIANTS) + " hold", file=out)
        return
    print(f"COUNTEREXAMPLE {found.invariant} {INVARIANTS.get(found.invariant, '')}: "
          f"{found.detail}", file=out)
    print(f"shortest trace ({len(found.trace)} actions):", file=out)
    for number, label in enumerate(found.trace, 1):
        print(f"  {number:>2}. {label}", file=out)


def _pairs(text: str, what: str) -> dict[str, str]:
    pairs = [item.partition("=") for item in text.split(",") if item.strip()]
    bad = [key for key, eq, value in pairs if not eq or not value.strip()]
    if bad:
        raise ValueError(f"{what}: expected key=value pairs separated by commas, got {text!r}")
    return {key.strip(): value.strip() for key, _, value in pairs}


def parse_bounds(text: str) -> Bounds:
    """``sessions=4,messages=4,restarts=1,approvals=1,depth=N,disabled=1,trees=1``; omitted
    keys keep defaults."""
    given = _pairs(text, "--bounds")
    known = {field.name for field in attrs.fields(Bounds)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"--bounds: unknown key(s) {', '.join(unknown)}; "
                         f"valid keys are {', '.join(sorted(known))}")
    try:
        return Bounds(**{key: int(value) for key, value in given.items()})
    except ValueError as exc:
        raise ValueError(f"--bounds: {exc}") from None


def load_config(path: str | None, inline: str) -> MessagingConfig:
    """The [messaging] table of a TOML file (else the checker's defaults), then ``inline``
    ``key=value`` overrides; validated like any config."""
    config = DEFAULT_CONFIG
    if path is not None:
        with open(path, encoding="utf-8") as handle:
            config = MessagingConfig.from_toml(handle.read())
    words = {"true": True, "false": False}
    overrides: dict[str, Any] = {
        key: words[value.lower()] if value.lower() in words else int(value)
        for key, value in _pairs(inline, "--messaging").items()
    }
    return MessagingConfig.from_mapping({**attrs.asdict(config), **overrides})


def main(bounds: str = "", config: str | None = None, messaging: str = "",
         plant: str | None = None, history: bool = False,
         progress: TextIO | None = None, store: StoreFactory | None = None,
         store_name: str = "memory", workers: int | None = None) -> int:
    """``treemail check``: 0 when no counterexample, 1 with one, 2 on bad arguments.
    ``progress`` takes the live progress line (the CLI gives its console's; None: quiet).
    ``store``: a factory of fresh stores every transition also runs on (``store_name``).
    ``workers``: processes to search over; None: one per core this process may use."""
    try:
        limits_, settings = parse_bounds(bounds), load_config(config, messaging)
        if plant is not None and plant not in PLANTS:
            raise ValueError(f"--plant: no bug {plant!r}; choose from {', '.join(PLANTS)}")
        if workers is not None and workers < 1:
            raise ValueError(f"--workers: must be at least 1, got {workers}")
    except (ValueError, OSError, TreemailError) as exc:
        print(f"treemail check: {exc}", file=sys.stderr)
        return 2
    shown = ", ".join(f"{f.name}={getattr(limits_, f.name)}" for f in attrs.fields(Bounds))
    pool = workers if workers is not None else workers_available()
    print(f"treemail check: bounds {shown}; [messaging] {_config_line(settings)}"
          + (f"; planted bug: {plant}" if plant else "")
          + (f"; every transition also run on the {store_name} store" if store else "")
          # the other store's replay runs in this process: one worker
          + (f"; {pool} worker processes" if pool > 1 and store is None else ""))
    # Only the default search's size is known; a planted bug may stop it early.
    default = (limits_, settings, history, plant) == (Bounds(), DEFAULT_CONFIG, False, None)
    with planted(plant):
        result = check(settings, limits_, progress, history, store, pool,
                       expected=DEFAULT_STATES if default else None)
    code = 0 if result.counterexample is None else 1
    try:
        report(result)
    except BrokenPipeError:  # `treemail check | head`: the exit code still tells
        sys.stdout = None  # nothing left to flush at exit
    return code


def _config_line(config: MessagingConfig) -> str:
    return " ".join(f"{key}={value}" for key, value in attrs.asdict(config).items())


def workers_available() -> int:
    """One worker per core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
