"""The daemon's subcommands of the ``treemail`` command line, registered from ``cli.py``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from treemail.core.errors import TreemailError

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    daemon = commands.add_parser(
        "daemon", help="serve a data directory over JSON-RPC (protocol 19)")
    _data_dir(daemon)
    daemon.add_argument("--socket", type=Path,
                        help="the Unix socket (default: DATA_DIR/daemon.sock)")
    daemon.add_argument("--stdio", action="store_true",
                        help="also serve one client over stdin/stdout")
    daemon.set_defaults(run=_daemon)


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path("./.treemail"),
                        help="the data directory (default: ./.treemail)")


def _daemon(args: argparse.Namespace) -> int:
    from treemail.adapters.daemon.host import run_daemon

    try:
        return asyncio.run(run_daemon(args.data_dir, args.socket, args.stdio))
    except TreemailError as error:
        print(f"treemail daemon: {error}", file=sys.stderr)
        return 2
