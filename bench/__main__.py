"""treemail benchmarks: one table, every line a ratio against a baseline measured in the
same run (or, for memory, in sibling subprocesses of the same run).

Lines: (a) sequential durable send p50/p99 against a raw single-put LMDB sync
txn; (b) 32 concurrent senders through the runtime against the raw sequential ceiling and
against persist-queue put from 32 threads; (c) the full lifecycle against persist-queue
put+get+ack; (d) a send's cost with long histories; (e) open and recover with a long history;
(f) peak RSS with much pending mail and after a long history; (g) CPU per send, sync off;
(h) the model checker's states per second, and `treemail check` at its default bounds
against its target; (i) the store's codec against the json + cattrs codec it replaced;
(j) what one peer costs the daemon: idle subscriptions, and pipelined large answers;
(k) the sequential durable send on PostgreSQL against the same send on LMDB; (l) how long a
client command takes to start, against the interpreter's own start; (m) how soon the TUI
opens on 100k events, against `treemail log` reading the same store; (n) PostgreSQL under
concurrency: 32 senders against a bare INSERT-per-transaction queue, 2 daemons against 1;
(o) treemail beside persist-queue and a bare PostgreSQL queue (INSERT, SKIP LOCKED DELETE),
sequential and 32 at once, every figure interleaved in chunks (``bench/beside.py``), with
the pages one commit writes and the flushes per send.

Beside the targets, lines that say what limits them, measured in the same run: bare LMDB
writing the very rows the sends wrote, sync on (a) and off (g), so that what a send's rows
cost the disk stands apart from what treemail's code adds; and (b)'s CPU ceiling, one over
the CPU each concurrent send took, the rate no batching can pass in one interpreter.

persist-queue and cattrs come from the ``bench`` extra: ``pip install -e '.[bench]'``.
Results also go to ``bench/results.json``, with the load average before and after the run.

Usage: python -m bench [--quick] [--only a,b,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from bench import lines
from bench.beside import beside_lines, load_average
from bench.bounds import bounds_lines
from bench.checker import checker_lines
from bench.cluster import cluster_lines
from bench.codec import codec_line
from bench.lines import Line, Scale
from bench.postgres import postgres_lines
from bench.rigs import env_note
from bench.startup import startup_lines
from bench.tui import tui_lines
from treemail.adapters.ui.console import advance, steps

RESULTS = Path(__file__).with_name("results.json")


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.2f}"


def table(rows: list[Line]) -> str:
    head = f"{'line':<50} {'treemail':>12} {'baseline':>12} {'ratio':>8}  target   met  baseline is"
    out = [head, "-" * len(head)]
    for row in rows:
        met = "-" if row.met is None else ("yes" if row.met else "NO")
        out.append(f"{row.what:<50} {_fmt(row.value):>9} {row.unit:<2} {_fmt(row.baseline):>9} "
                   f"{row.unit:<2} {row.ratio:7.2f}x  {row.target:<8} {met:<4} {row.base_label}")
    return "\n".join(out)


def run(quick: bool, only: set[str], verbose: bool = False,
        done: Callable[[str], None] = lambda name: None) -> list[Line]:
    scale = Scale.of(quick)
    rows: list[Line] = []
    clock = time.perf_counter()

    def took(name: str) -> None:
        nonlocal clock
        if verbose:
            print(f"  {name}: {time.perf_counter() - clock:.1f} s", flush=True)
        clock = time.perf_counter()
        done(name)

    with tempfile.TemporaryDirectory(prefix="treemail-bench-") as tmp:
        root = Path(tmp)
        # (f) needs (d)'s long history: (d) runs if either is asked.
        big = root
        made: dict[str, list[Line]] = {}
        if "a" in only:
            made["a"] = lines.sequential(root, scale)
            took("a")
        if only & {"d", "f"}:
            got, big = lines.history(root, scale)
            made["d"] = got if "d" in only else []
            took("d")
        steps: dict[str, Callable[[], list[Line]]] = {
            "b": lambda: lines.concurrent(root, scale),
            "c": lambda: lines.lifecycle(root, scale),
            "e": lambda: lines.reconcile(root, scale),
            "f": lambda: lines.memory(root, scale, big),
            "g": lambda: lines.cpu(root, scale),
            "h": lambda: checker_lines(quick),
            "i": codec_line,
            "j": lambda: bounds_lines(root),
            "k": lambda: postgres_lines(root, scale),
            "l": lambda: startup_lines(quick),
            "m": lambda: tui_lines(root, quick),
            "n": lambda: cluster_lines(root, scale),
            "o": lambda: beside_lines(root, scale),
        }
        for name, step in steps.items():
            if name in only:
                made[name] = step()
                took(name)
    # In the order of the lines' letters, each line's rows as its step made them: a row's
    # key is not its letter everywhere (line (k) keeps its first keys, j_p50 and j_p99).
    for name in sorted(made):
        rows += made[name]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts, under a minute")
    parser.add_argument("--only", default="abcdefghijklmno", help="which lines, e.g. --only a,b")
    parser.add_argument("--verbose", action="store_true", help="time each line")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    missing = [name for name in ("persistqueue", "cattrs")
               if importlib.util.find_spec(name) is None]
    if missing:  # the baselines of (b), (c) and (i): without them no line has its ratio
        parser.exit(2, f"python -m bench: the bench extra is not installed ({', '.join(missing)} "
                       "missing): pip install -e '.[bench]', or run `just bench`\n")
    start = time.perf_counter()
    load_before = load_average()
    only = set(args.only.replace(",", ""))
    ran = only | ({"d"} if only & {"d", "f"} else set())
    with steps(len(ran & set("abcdefghjlmo")), "bench") as bar:  # a bar on a terminal only
        rows = run(args.quick, only, args.verbose,
                   lambda name: advance(bar, f"line {name} done"))
    elapsed = time.perf_counter() - start
    load_after = load_average()
    print(table(rows))
    print(f"\n{'quick' if args.quick else 'full'} run in {elapsed:.0f} s, load average "
          f"{load_before:.2f} before and {load_after:.2f} after")
    report = {"quick": args.quick, "seconds": round(elapsed, 1), **env_note(),
              "load_before": load_before, "load_after": load_after,
              "lines": [{**attrs.asdict(r), "ratio": r.ratio} for r in rows]}
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
