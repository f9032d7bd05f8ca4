"""The ``treemail`` command line: the demo, the model checker, and the event log.

Everything heavy (the engine, the store, rich, Textual) is imported by the command that uses
it, so that ``treemail --version`` and the daemon's client commands start at once."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treemail.adapters.ui import attach as attach_command
from treemail.adapters.ui import commands as daemon_commands
from treemail.adapters.ui import doctor as doctor_command
from treemail.adapters.ui import init as init_command
from treemail.adapters.ui import run_cmd as run_command
from treemail.models.plants import PLANTS

if TYPE_CHECKING:
    from treemail.core.engine import Engine
    from treemail.core.records import Event
    from treemail.core.store import Store

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`treemail log STORE | head`): stop quietly, as the shell's own
        # tools do, with 128 + SIGPIPE; nothing more goes to the closed pipe, not even the
        # interpreter's flush at exit.
        with contextlib.suppress(OSError, ValueError):  # stdout may be no file (a capture)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


class _Version(argparse.Action):
    """``--version``: the installed package's version, read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("treemail")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "unknown (not installed)"
        print(f"treemail {found}")  # stdout, as every tool's --version: `$(treemail --version)`
        parser.exit(0)


def _suggest(parser: argparse.ArgumentParser, choices: Sequence[str],
             argv: Sequence[str]) -> None:
    """A mistyped command is a usage error that names the commands it is close to."""
    import difflib

    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in choices or argv.index(word) != 0:
        return  # only a command word in first place: an option's value is not a command
    near = difflib.get_close_matches(word, choices, n=3)
    hint = (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near
            else "; `treemail --help` lists them")
    parser.print_usage(sys.stderr)
    parser.exit(2, f"treemail: no command {word!r}{hint}\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole ``treemail`` command line, every subcommand registered: what ``main``
    parses, and what a test parses the documented command lines with."""
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser and its command names (for the did-you-mean of a mistyped one)."""
    parser = argparse.ArgumentParser(prog="treemail", description=__doc__)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo on the embedded LMDB store")
    demo.add_argument("--path", help="keep the store in this directory (default: a temp dir)")
    daemon_commands.extend_demo(demo)
    daemon_commands.store_option(demo, "run the demo on this new, empty store (not memory:, "
                                       "which a restart does not find again)")
    log = commands.add_parser("log", help="replay a store's event log, or follow it live")
    log.add_argument("path", nargs="?",
                     help="the store directory (or give --store URL, or --data-dir)")
    daemon_commands.store_option(log, "the store to read")
    _data_dir(log)
    daemon_commands.json_option(log)
    log.add_argument("--session", help="only this session (UUID or handle)")
    log.add_argument("--follow", action="store_true", help="keep printing new events")
    log.add_argument("--interval", type=daemon_commands.seconds, default=0.5,
                     help="seconds between polls")
    check = commands.add_parser(
        "check", help="bounded exhaustive model check of the engine against the reference model")
    check.add_argument("--bounds", default="",
                       help="sessions=4,messages=4,restarts=1,approvals=1,depth=N,disabled=1,"
                            "trees=1 (any subset)")
    check.add_argument("--config", help="a TOML file whose [messaging] table sets the limits")
    check.add_argument("--messaging", default="",
                       help="limits inline, after --config: max_pending_per_session=2,...")
    check.add_argument("--plant", help="plant a known bug in the engine to see it caught: "
                       + ", ".join(PLANTS))
    check.add_argument("--history", action="store_true",
                       help="key states on their whole past too (ids renamed only)")
    check.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    check.add_argument("--workers", type=int, default=None,
                       help="processes to search over (default: one per core); the states, "
                            "coverage and counterexample are the same for any number")
    check.add_argument("--store", choices=("memory", "lmdb"), default="memory",
                       help="lmdb: also run every transition on a fresh LMDB store (replaying "
                            "the path to its state there): slow, for small --bounds")
    verify = commands.add_parser(
        "verify", help="check every record's checksum and every index of a store")
    verify.add_argument("path", nargs="?",
                        help="the store directory (or give --store URL, or --data-dir)")
    daemon_commands.store_option(verify, "the store to check")
    _data_dir(verify)
    daemon_commands.register(commands)
    init_command.register(commands)
    run_command.register(commands)
    doctor_command.register(commands)
    attach_command.register(commands)
    tui = commands.add_parser(
        "tui", help="watch sessions converse and answer approvals (read-only on a store)")
    tui.add_argument("--data-dir", type=Path, default=Path("./.treemail"),
                     help="its daemon if one runs, else a read-only replay of DIR/store")
    tui.add_argument("--connect", metavar="ADDRESS",
                     help="a daemon's address: tcp://HOST:PORT, or a socket path")
    tui.add_argument("--token-file", type=Path,
                     help="the TCP token's file (default: DATA_DIR/daemon.token; "
                          "TREEMAIL_TOKEN overrides it)")
    daemon_commands.store_option(tui, "replay this store read-only instead of DATA_DIR's")
    tui.set_defaults(run=_tui, socket=None)
    return parser, list(commands.choices)


def _main(argv: Sequence[str] | None) -> int:
    parser, names = _build()
    argv = sys.argv[1:] if argv is None else list(argv)
    _suggest(parser, names, argv)
    args = parser.parse_args(argv)
    if hasattr(args, "run"):  # a subcommand registered from its own module
        return int(args.run(args))
    if args.command in ("log", "verify"):
        args.path = _one_store(parser, args)
    if args.command == "verify":
        from treemail.adapters.store.verify import main as verify_main

        return verify_main(args.path, sys.stdout, sys.stderr)
    if args.command == "demo" and args.connect:
        return daemon_commands.connected_demo(args)
    if args.command == "demo":
        from treemail.adapters.ui.demo import main as demo_main

        if args.approve or args.wait is not None:
            parser.exit(2, "treemail demo: --approve and --wait go with --connect; the "
                           "embedded demo answers its own approval\n")
        if args.path is not None and args.store is not None:
            parser.exit(2, "treemail demo: give --path or --store, not both\n")
        url = args.store if args.path is None else f"lmdb:{args.path}"
        problem = _fresh_store(url)
        if problem is not None:
            parser.exit(2, f"treemail demo: {problem}\n")
        return demo_main(url)
    if args.command == "check":
        from treemail.adapters.ui.console import ProgressLine
        from treemail.models.command import main as check_main

        # States explored and the rate: live on a terminal (rich), the final line elsewhere.
        progress = None if args.quiet else ProgressLine(sys.stderr, "check")
        return check_main(args.bounds, args.config, args.messaging, args.plant,
                          history=args.history, progress=progress,
                          store=_scratch_lmdb if args.store == "lmdb" else None,
                          store_name=args.store, workers=args.workers)
    return show_log(args.path, args.session, follow=args.follow, interval=args.interval,
                    as_json=args.json)


@contextlib.contextmanager
def _scratch_lmdb() -> Iterator[Store]:
    """A fresh LMDB store in a temporary directory, removed afterwards: ``check --store
    lmdb`` runs each transition on one. Unsynced: nothing in it outlives the check."""
    import tempfile

    from treemail.adapters.store.factory import open_store

    with tempfile.TemporaryDirectory(prefix="treemail-check-") as directory:
        store = open_store(f"lmdb:{Path(directory) / 'store'}", sync=False)
        try:
            yield store
        finally:
            store.close()


def _tui(args: argparse.Namespace) -> int:
    from treemail.adapters.ui import extras
    from treemail.core.errors import ExtraMissing

    try:  # Textual loads only for the TUI, and is an extra
        app = extras.load("treemail.adapters.ui.tui.app", "tui", "tui")
    except ExtraMissing as error:
        print(f"treemail tui: {error.message} [{error.code}]", file=sys.stderr)
        return 2
    code: int = app.main(args)
    return code


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="the data directory whose store to read, DATA_DIR/store, as the "
                             "daemon keeps it (the default: ./.treemail)")


def _one_store(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The URL of the store ``log`` or ``verify`` reads: the positional directory (always a
    path, whatever it holds), ``--store URL`` or ``--data-dir`` (DATA_DIR/store), one of
    them; none is ``./.treemail``'s store, as for every other command."""
    given = [x for x in (args.path, args.store, args.data_dir) if x is not None]
    if len(given) > 1:
        parser.exit(2, f"treemail {args.command}: give the store once: as a directory, as "
                       "--store URL or as --data-dir (one of them)\n")
    if args.store is not None:
        return str(args.store)
    if args.path is not None:
        return f"lmdb:{args.path}"
    return f"lmdb:{(args.data_dir or Path('.treemail')) / 'store'}"


def _fresh_store(url: str | None) -> str | None:
    """Why the store ``url`` names cannot take the demo, or None: the demo plays a fixed
    scenario with fixed ids, so it needs a new or empty store, and one that a restart finds
    again (the demo crashes and recovers in the middle)."""
    from treemail.adapters.store.factory import Kind, open_store, parse
    from treemail.core.errors import TreemailError

    if url is None:
        return None
    try:
        where = parse(url)
        if where.kind is Kind.LMDB:
            return _fresh_directory(where.location)
        if where.kind is Kind.MEMORY:
            return ("memory: is gone when the demo's process restarts its store; give a "
                    "directory or a postgresql:// URL")
        store = open_store(url)
        try:
            with store.read() as tx:
                used = tx.feed_end() > 0 or next(tx.sessions(), None) is not None
        finally:
            store.close()
    except TreemailError as exc:
        return str(exc)
    return (f"the store {url!r} is not empty (a store from an earlier run?); the demo needs "
            "a new or empty store") if used else None


def _fresh_directory(path: str) -> str | None:
    """Why directory ``path`` cannot take the demo's store, or None."""
    from pathlib import Path

    where = Path(path)
    if where.exists() and not where.is_dir():
        return f"--path {path!r} is not a directory; give a new or empty directory"
    if where.is_dir() and any(where.iterdir()):
        return (f"--path {path!r} is not empty (a store from an earlier run?); the demo "
                "needs a new or empty directory: remove it or pick another")
    return None


def show_log(path: str, session: str | None, *, follow: bool, interval: float,
             as_json: bool = False) -> int:
    """Print the feed of the store ``path`` names (a directory or a store URL) in global
    order; with ``follow``, poll for what is appended later."""
    from treemail.adapters.store.factory import open_store
    from treemail.adapters.ui.console import console, print_row
    from treemail.adapters.ui.transcript import event_row
    from treemail.core.engine import Engine
    from treemail.core.errors import TreemailError
    from treemail.core.ids import CountingIds

    try:
        store = open_store(path, readonly=True)  # a reader: no lock, never writes
    except TreemailError as exc:
        print(f"treemail log: {exc}", file=sys.stderr)
        return 2
    engine = Engine(store, CountingIds())  # read-only use: no id is ever minted
    out = console()
    seen = 0
    try:
        wanted = None if session is None else _session_id(engine, session)
        if session is not None and wanted is None:
            print(f"treemail log: no session {session!r} in {path!r}; give a session "
                  "UUID or handle shown by `treemail log`", file=sys.stderr)
            return 2
        while True:
            names = {s.session_id: s.reference for s in engine.sessions()}

            def name(sid: str | None, names: dict[str, str] = names) -> str:
                return names.get(sid or "", sid or "?")

            for number, event in engine.feed(seen):
                seen = number
                if wanted is not None and event.session_id != wanted:
                    continue
                if as_json:  # the daemon's event view: `tail --json`'s very fields
                    daemon_commands.json_line(_view(number, event))
                else:
                    print_row(event_row(event, name), out)
            if not follow:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:  # ^C while following; `| head` is main's BrokenPipeError
        return 0
    finally:
        store.close()


def _view(number: int, event: Event) -> Any:
    import msgspec

    from treemail.adapters.daemon.views import event_view

    return msgspec.to_builtins(event_view(number, event))


def _session_id(engine: Engine, reference: str) -> str | None:
    """The id of the session ``reference`` names, by UUID or handle; None if none."""
    for found in engine.sessions():
        if reference in (found.session_id, found.handle):
            return found.session_id
    return None
