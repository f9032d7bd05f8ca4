"""Durability modes: the exact LMDB flags of each, and what a process-mode commit survives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from treemail.adapters.store.durability import Durability
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import ConfigError
from treemail.core.keys import CounterName


@pytest.mark.parametrize(("mode", "metasync"), [("fsync", True), ("process", False)])
def test_each_mode_opens_with_its_documented_flags(tmp_path: Path, mode: str,
                                                   metasync: bool) -> None:
    store = LmdbStore.open(tmp_path / "db", durability=mode)
    try:
        flags = store._env.flags()
        assert (flags["sync"], flags["metasync"], flags["writemap"]) == (True, metasync, False)
    finally:
        store.close()


def test_fsync_is_the_default(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "db")
    try:
        assert store._env.flags()["metasync"] is True
    finally:
        store.close()


def test_an_unknown_mode_is_a_config_error_that_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        LmdbStore.open(tmp_path / "db", durability="sometimes")
    assert raised.value.code == ConfigError.code
    assert "fsync, process" in raised.value.message
    assert not (tmp_path / "db").exists()


def test_a_process_mode_commit_survives_the_process_being_killed(tmp_path: Path) -> None:
    child = textwrap.dedent(f"""
        import os, signal
        from treemail.adapters.store.lmdb_store import LmdbStore
        store = LmdbStore.open({str(tmp_path / "db")!r}, durability="process")
        store.transact(lambda tx: tx.add("kept", 7))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", child], check=False)
    assert done.returncode == -9
    store = LmdbStore.open(tmp_path / "db", durability=Durability.PROCESS)
    try:
        with store.read() as tx:
            assert tx.count(CounterName("kept")) == 7
    finally:
        store.close()


def test_the_flags_of_a_mode_are_durable_unless_sync_is_turned_off() -> None:
    # sync=False is for tests and benchmarks only: without it, a mode's flags are its own.
    from treemail.adapters.store.durability import lmdb_flags

    assert lmdb_flags("fsync") == {"sync": True, "metasync": True}
    assert lmdb_flags(Durability.PROCESS) == {"sync": True, "metasync": False}
    assert lmdb_flags("fsync", sync=False) == {"sync": False, "metasync": False}


def test_an_unknown_mode_names_itself_in_the_error_details(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        LmdbStore.open(tmp_path / "db", durability="sometimes")
    assert raised.value.details == {"durability": "sometimes"}
    assert raised.value.message == ("unknown durability mode 'sometimes'; choose one of "
                                    "fsync, process")
