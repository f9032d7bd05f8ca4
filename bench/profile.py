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

from bench.rigs import Pair, open_store


def _sends(pair: Pair, count: int) -> None:
    for n in range(count):
        pair.send()
        if n % 50 == 49:
            pair.deliver()


def main() -> None:
    from pyinstrument import Profiler  # the bench extra

    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--top", type=int, default=25, help="frames listed by own time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="treemail-profile-") as tmp:
        pair = Pair(open_store(Path(tmp) / "send", sync=False))
        _sends(pair, 200)  # warm: caches, the map, the first pages
        profiler = Profiler(interval=0.001)
        profiler.start()
        _sends(pair, args.sends)
        session = profiler.stop()
        pair.store.close()
    own: dict[str, float] = {}
    _own_times(session.root_frame(), own)
    total = session.duration
    print(f"{args.sends} sends (+ a drain per 50) in {total:.2f} s: "
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
