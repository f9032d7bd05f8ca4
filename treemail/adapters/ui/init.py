"""``treemail init``: a data directory to start from, with a config and two agents.

It writes ``DATA_DIR/config.toml`` (every key, commented out at its default, with the model
line to change for a real model) and two agent docs into ``DATA_DIR/agents/``, a lead that
delegates and a helper that reports, so ``treemail daemon`` has a tree to run at once. The
config is generated from the declarations the daemon decodes it with (``settings.py``), so it
always parses, and names only keys that exist. Files are created private (0600, directories
0700) and never overwritten: if any of them exists, nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs
import msgspec

from treemail.adapters.store.private import PRIVATE_FILE, private_dir
from treemail.adapters.ui.commands import Sub
from treemail.core.config import DEFAULTS
from treemail.core.errors import ConfigError, ConfigExists, StorageError

__all__ = ["AGENTS", "config_text", "init", "register"]

# The daemon's modules (settings, limits) load the runtime: imported where used, so that the
# command line does not pay for them on every start (spec: client commands start fast).
DEFAULT_DATA_DIR = "./.treemail"


AGENTS: Mapping[str, str] = {
    "lead.md": """---
name: lead
description: Takes a task, delegates a part of it to a helper, and reports
permissions:
  message:
    child: allow
---
You lead a small task. Delegate what a helper can do, read its report, and answer.
delegate helper: Look into the task and report what you find.
""",
    "helper.md": """---
name: helper
description: Does what its lead asks and reports back
permissions:
  message:
    parent: allow
---
You help your lead: do what it asks and report to it.
""",
}


def config_text() -> str:
    """The commented ``config.toml``: each table with each key at its default."""
    from treemail.adapters.daemon.connection import Limits
    from treemail.adapters.daemon.settings import (
        ClusterTable,
        DaemonTable,
        OpenAITable,
        RunsTable,
        ScriptedTable,
    )

    lines = [
        "# treemail daemon config: DATA_DIR/config.toml, read at start (and only here).",
        "# Every key is optional and shown commented out at its default; spec/config.md",
        "# says what each one means. An unknown table or key is refused at start.",
        "",
        "[daemon]",
        '# "scripted" runs offline; "openai" puts a real model behind the agents: set',
        "# [daemon.openai] base_url and model, and export the variable api_key_env names.",
        'model = "scripted"',
        f"# actor_idle_timeout = {json.dumps(DaemonTable().actor_idle_timeout)}",
        "",
    ]
    tables: list[tuple[str, Mapping[str, object]]] = [
        ("daemon.openai", msgspec.structs.asdict(OpenAITable())),
        ("daemon.scripted", msgspec.structs.asdict(ScriptedTable())),
        ("daemon.limits", {f.name: f.default for f in attrs.fields(Limits)}),
        ("daemon.cluster", msgspec.structs.asdict(ClusterTable())),
        ("messaging", DEFAULTS),
        ("runs", msgspec.structs.asdict(RunsTable())),
    ]
    for table, defaults in tables:
        lines += [f"[{table}]", *(f"# {key} = {json.dumps(value)}"
                                  for key, value in defaults.items()), ""]
    assert {name for name, _ in tables} >= {
        f"daemon.{f}" for f in DaemonTable.__struct_fields__
        if f not in ("model", "actor_idle_timeout")}
    return "\n".join(lines)


def _planned(data_dir: Path) -> Iterator[tuple[Path, str]]:
    from treemail.adapters.daemon.settings import CONFIG_FILE

    yield data_dir / CONFIG_FILE, config_text()
    for name, text in AGENTS.items():
        yield data_dir / "agents" / name, text


def init(data_dir: Path) -> list[Path]:
    """Write the config and the agents into ``data_dir``; the paths written. Refuses
    (``ConfigExists``, nothing written) if any of them exists."""
    planned = list(_planned(data_dir))
    taken = [str(path) for path, _ in planned if path.exists() or path.is_symlink()]
    if taken:
        raise ConfigExists(f"{', '.join(taken)} already exist(s); init writes nothing over "
                          "your files: remove them, or init another --data-dir",
                          paths=taken)
    from treemail.adapters.daemon.settings import CONFIG_FILE

    # The data directory is the daemon's: private, as ``datadir.take`` would make it.
    private_dir(data_dir, markers=(CONFIG_FILE, "agents", "store"))
    private_dir(data_dir / "agents", markers=None)
    for path, text in planned:
        _write_new(path, text)
    return [path for path, _ in planned]


def _write_new(path: Path, text: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, PRIVATE_FILE)
    except FileExistsError:  # made meanwhile: still never overwritten
        raise ConfigExists(f"{path} already exists; init writes nothing over your files",
                          paths=[str(path)]) from None
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror or exc}",
                           path=str(path)) from exc
    with open(fd, "w", encoding="utf-8") as file:
        os.fchmod(fd, PRIVATE_FILE)  # whatever the umask took
        file.write(text)


def register(commands: Sub) -> None:
    parser = commands.add_parser(
        "init", help="write a commented config.toml and two example agents into DATA_DIR")
    parser.add_argument("--data-dir", type=Path, default=Path(DEFAULT_DATA_DIR),
                        help=f"the data directory (default: {DEFAULT_DATA_DIR})")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        written = init(args.data_dir)
    except (ConfigError, StorageError) as error:
        print(f"treemail init: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"start it with: treemail daemon --data-dir {args.data_dir}")
    return 0
