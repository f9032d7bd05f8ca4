"""Calls per send: ``python -m bench.calls [--sends N] [--top K]``.

Line (g)'s workload (a running sender and recipient, sync off, the recipient draining every
50 sends) under cProfile, the drains left out: the function calls one send makes (Python
functions and the C functions they call, each counted once per call), and the heaviest by
own time. Counts, unlike times, do not move with the machine's load, so they compare
across runs; the speed claims stay in the bench's ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
from pathlib import Path

from bench.rigs import Pair, open_store


def profile_sends(sends: int) -> pstats.Stats:
    with tempfile.TemporaryDirectory(prefix="treemail-calls-") as tmp:
        pair = Pair(open_store(Path(tmp) / "send", sync=False))
        for _ in range(200):  # warm: caches, the map, the first pages
            pair.send()
        pair.deliver()
        profiler = cProfile.Profile()
        for start in range(0, sends, 50):
            profiler.enable()
            for _ in range(min(50, sends - start)):
                pair.send()
            profiler.disable()
            pair.deliver()
        pair.store.close()
    return pstats.Stats(profiler)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calls", description=__doc__)
    parser.add_argument("--sends", type=int, default=1000)
    parser.add_argument("--top", type=int, default=15, help="functions listed by own time")
    args = parser.parse_args()
    stats = profile_sends(args.sends).stats  # type: ignore[attr-defined]
    calls = sum(row[1] for row in stats.values())
    python = sum(row[1] for (path, _, _), row in stats.items() if path != "~")
    own = sum(row[2] for row in stats.values())
    print(f"{calls / args.sends:.0f} calls per send ({python / args.sends:.0f} to Python "
          f"functions), {own / args.sends * 1e6:.0f} µs per send under the profiler")
    print(f"{'calls':>6} {'own %':>6}  function")
    ranked = sorted(stats.items(), key=lambda item: -item[1][2])[:args.top]
    for (path, line, name), row in ranked:
        where = name if path == "~" else f"{name} ({_short(path)}:{line})"
        print(f"{row[1] / args.sends:6.1f} {row[2] / own * 100:6.1f}  {where}")


def _short(path: str) -> str:
    for marker in ("treemail/", "bench/", "site-packages/", "lib/python"):
        if marker in path:
            return path[path.index(marker):]
    return path


if __name__ == "__main__":
    main()
