"""What a daemon keeps is private to its user: directories 0700, files and the socket 0600,
under the usual umask 022 (which made them 0755 and 0644 before: every local user could
read every body, task and model output). A store found open to others is repaired and the
repair said on stderr; a directory that is not treemail's is refused, left as it was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import treemail
from tests.daemon.conftest import DaemonProcess, run
from tests.unit.test_store_files_edges import not_treemails
from treemail.adapters.daemon.registered import REGISTERED_DIR
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.private import private_dir, private_files
from treemail.core.errors import StoreNotPrivate
from treemail.protocol import types as t
from treemail.protocol.methods import SESSION_CREATE

DOC = "---\nname: kept_private\ndescription: Registered over the wire\n---\nYou keep secrets.\n"


def _modes(root: Path) -> dict[str, tuple[str, int]]:
    """Every path under ``root`` (and root itself): its kind and permission bits."""
    found = {}
    for path in [root, *root.rglob("*")]:
        mode = os.lstat(path).st_mode
        kind = ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
                else "socket" if stat.S_ISSOCK(mode) else "other")
        found[str(path.relative_to(root))] = (kind, stat.S_IMODE(mode))
    return found


def _not_private(modes: dict[str, tuple[str, int]]) -> dict[str, str]:
    want = {"dir": 0o700, "file": 0o600, "socket": 0o600}
    return {name: f"{kind} {mode:04o}" for name, (kind, mode) in modes.items()
            if want.get(kind) != mode}


def _served(data: Path) -> tuple[dict[str, tuple[str, int]], str]:
    """Start a daemon on ``data`` under umask 022, register an agent over the wire, and
    return the modes while it runs and what it said on stderr once stopped."""
    async def register() -> None:
        client = await daemon.client()
        try:
            await client.request(SESSION_CREATE, t.SessionCreateParams(agent_doc=DOC))
        finally:
            await client.close()

    daemon = DaemonProcess(data, umask=0o022)
    try:
        run(register())
        running = _modes(data)
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
    return running, err


def test_a_new_data_directory_is_private_and_ignored_by_git(tmp_path: Path) -> None:
    data = tmp_path / "data"
    running, err = _served(data)
    assert {".", "store", "store/data.mdb", "store/lock.mdb", "store/owner.lock",
            "daemon.sock", ".gitignore", REGISTERED_DIR,
            f"{REGISTERED_DIR}/kept_private.md"} <= set(running), running
    assert _not_private(running) == {}
    assert _not_private(_modes(data)) == {}  # and once it stopped
    assert (data / ".gitignore").read_text() == "*\n"
    assert "open to other users" not in err  # nothing needed repairing


def test_an_embedded_store_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        engine = treemail.open_engine(str(tmp_path / "app" / "nested" / "store"))
    finally:
        os.umask(old)
    try:
        modes = _modes(tmp_path / "app")
    finally:
        assert isinstance(engine.store, LmdbStore)
        engine.store.close()
    assert {"nested", "nested/store", "nested/store/data.mdb", "nested/store/lock.mdb",
            "nested/store/owner.lock"} <= set(modes), modes
    assert _not_private(modes) == {}


def test_a_data_directory_left_open_to_others_is_repaired_and_said(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _served(data)
    opened = [data, data / "store", data / "store" / "data.mdb", data / "store" / "lock.mdb",
              data / "store" / "owner.lock", data / REGISTERED_DIR,
              data / REGISTERED_DIR / "kept_private.md"]
    for path in opened:  # what an older treemail, or a copy, left
        path.chmod(0o755 if path.is_dir() else 0o644)
    running, err = _served(data)
    assert _not_private(running) == {}
    for path in opened:
        assert f"{path} was open to other users" in err, (path, err)


def test_a_directory_that_is_not_treemails_is_refused_and_left_as_it_was(
        tmp_path: Path) -> None:
    data = not_treemails(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(data)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert StoreNotPrivate.code in done.stderr
    assert f"chmod 700 {data}" in done.stderr
    assert stat.S_IMODE(data.stat().st_mode) == 0o755
    assert sorted(p.name for p in data.iterdir()) == ["notes.txt"]  # nothing written


def test_another_users_store_is_refused_naming_the_fix(tmp_path: Path) -> None:
    # Ownership cannot be given away without root, so the check is run as someone else:
    # the owner it is given is not the owner of the files.
    stranger = os.getuid() + 1
    store = tmp_path / "store"
    LmdbStore.open(store).close()
    for check in (lambda: private_dir(store, markers=None, uid=stranger),
                  lambda: private_files(store, uid=stranger)):
        with pytest.raises(StoreNotPrivate) as refused:
            check()
        assert f"not to this user (uid {stranger})" in refused.value.message
        assert f"chown -R {stranger} " in refused.value.message
    assert _not_private(_modes(store)) == {}
