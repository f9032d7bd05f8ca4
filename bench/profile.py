"""A profile of the send path: ``python -m bench.profile [--sends N] [--top K]``.

Line (g)'s workload (a running sender and recipient, sync off, the recipient draining every
50 sends) under pyinstrument (the bench extra); prints the heaviest frames of the send path
by own time, and the call tree. Profiles are for finding where the time goes; the speed
claims stay in the bench's ratios.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.rigs import Pair, open_store


def _sends(pair: Pair, count: int, profiler: Any = None) -> None:
    """``count`` sends, the recipient draining every 50; with ``profiler``, only the sends
    are profiled (the drains run between its samples), as line (g) counts them."""
    for start in range(0, count, 50):
        if profiler is not None:
            profiler.start()
        for _ in range(min(50, count - start)):
            pair.send()
        if profiler is not None:
            profiler.stop()
        pair.deliver()


def main() -> None:
    from pyinstrument import Profiler  # the bench extra

    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--top", type=int, default=25, help="frames listed by own time")
    parser.add_argument("--sends-only", action="store_true",
                        help="profile the sends alone, not the drains between them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="treemail-profile-") as tmp:
        pair = Pair(open_store(Path(tmp) / "send", sync=False))
        _sends(pair, 200)  # warm: caches, the map, the first pages
        profiler = Profiler(interval=0.001)
        if args.sends_only:
            _sends(pair, args.sends, profiler)
            assert profiler.last_session is not None  # it ran
            session = profiler.last_session
        else:
            profiler.start()
            _sends(pair, args.sends)
            session = profiler.stop()
        pair.store.close()
    own: dict[str, float] = {}
    _own_times(session.root_frame(), own)
    total = session.duration
    drains = "" if args.sends_only else " (+ a drain per 50)"
    print(f"{args.sends} sends{drains} in {total:.2f} s: "
          f"{total / args.sends * 1e6:.0f} µs per send, wall, profiler on")
    print(f"{'own %':>6}  frame")
    for name, spent in sorted(own.items(), key=lambda item: -item[1])[:args.top]:
        print(f"{spent / total * 100:6.1f}  {name}")
    print(profiler.output_text(unicode=True, color=False, show_all=False))


def _own_times(frame: object, into: dict[str, float]) -> None:
    """Each function's own time (its time minus its children's), summed over the tree."""
    # pyinstrument's "[self]" and "[await]" children are the frame's own time, not calls.
    calls = [c for c in getattr(frame, "children", []) if not str(c.function).startswith("[")]
    spent = float(getattr(frame, "time", 0.0)) - sum(float(c.time) for c in calls)
    name = f"{getattr(frame, 'function', '?')} ({_short(getattr(frame, 'file_path', ''))}:" \
           f"{getattr(frame, 'line_no', 0)})"
    into[name] = into.get(name, 0.0) + spent
    for child in calls:
        _own_times(child, into)


def _short(path: object) -> str:
    text = str(path or "")
    for marker in ("treemail/", "bench/", "site-packages/"):
        if marker in text:
            return text[text.index(marker):]
    return text


if __name__ == "__main__":
    main()
