"""The ``treemail`` command line: the demo, the model checker, and log replay."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="treemail", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo on the embedded LMDB store")
    demo.add_argument("--path", help="keep the store in this directory (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from treemail.adapters.demo import main as demo_main

        return demo_main(args.path)
    parser.error(f"unknown command {args.command}")
    return 2
