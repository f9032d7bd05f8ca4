"""The store's files: the owner lock, read-only opens, and damaged ``data.mdb`` files.

Damage is made in the real file, and every open that must fail runs in a subprocess where a
signal (SIGBUS from mapping a truncated file) would show as a crash rather than kill pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.test_store_contract import CHILD, populate, snapshot
from treemail.adapters.store.lmdb_files import DATA_FILE, LOCK_FILE, OWNER_FILE, check_data_file
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import StorageError, StoreDamaged, StoreLocked, StoreMissing
from treemail.core.keys import CounterName
from treemail.core.store import WriteTxn


def made(directory: Path) -> Path:
    store = LmdbStore.open(directory, sync=False)
    store.transact(populate)
    store.close()
    return directory


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file with its size and modification time: what "never writes" is checked on."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def in_subprocess(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).parents[2])


def open_elsewhere(directory: Path, readonly: bool = False) -> subprocess.CompletedProcess[str]:
    return in_subprocess(f"""
        from treemail.adapters.store.lmdb_store import LmdbStore
        from treemail.core.errors import StorageError
        try:
            LmdbStore.open({str(directory)!r}, readonly={readonly}).close()
        except StorageError as exc:
            print(exc.code, exc)
        else:
            print("opened")
    """)


# -- the owner lock ------------------------------------------------------------------------


def test_second_writer_in_another_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "s", sync=False)
    try:
        second = open_elsewhere(tmp_path / "s")
        assert second.returncode == 0, second.stderr
        assert second.stdout.startswith(StoreLocked.code)
        assert f"pid {os.getpid()}" in second.stdout
        # A reader needs no lock and works beside the writer.
        assert open_elsewhere(tmp_path / "s", readonly=True).stdout.strip() == "opened"
    finally:
        store.close()
    assert open_elsewhere(tmp_path / "s").stdout.strip() == "opened"  # released on close


def test_a_dead_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys
        from treemail.adapters.store.lmdb_store import LmdbStore
        LmdbStore.open({str(tmp_path / "s")!r})
        print("ready", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parents[2])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked, match=f"pid {holder.pid}") as caught:
            LmdbStore.open(tmp_path / "s")
        assert caught.value.details["pid"] == str(holder.pid)
    finally:
        holder.kill()
        holder.wait()
    LmdbStore.open(tmp_path / "s").close()  # SIGKILL dropped the flock


# -- read-only opens -----------------------------------------------------------------------


def test_readonly_open_reads_and_never_writes(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    (directory / LOCK_FILE).unlink()
    (directory / OWNER_FILE).unlink()
    before = listing(directory)
    store = LmdbStore.open(directory, readonly=True)
    try:
        with store.read() as tx:
            assert snapshot(tx)["sessions"]
        with pytest.raises(StorageError, match="read-only"):
            store.transact(lambda tx: tx.add(CounterName("n"), 1))
    finally:
        store.close()
    assert listing(directory) == before  # no lock file, no owner file, no change


def test_readonly_open_of_no_store_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="no store"):
        LmdbStore.open(tmp_path / "absent", readonly=True)
    assert not (tmp_path / "absent").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreMissing):
        LmdbStore.open(tmp_path / "empty", readonly=True)
    assert list((tmp_path / "empty").iterdir()) == []


# -- damaged files -------------------------------------------------------------------------


@pytest.mark.parametrize("readonly", [False, True])
def test_empty_data_file_is_an_error_not_a_new_store(tmp_path: Path, readonly: bool) -> None:
    directory = made(tmp_path / "s")
    (directory / DATA_FILE).write_bytes(b"")
    before = listing(directory) if readonly else None
    with pytest.raises(StoreDamaged, match="empty"):
        LmdbStore.open(directory, readonly=readonly)
    assert (directory / DATA_FILE).stat().st_size == 0
    if readonly:
        assert listing(directory) == before


@pytest.mark.parametrize("readonly", [False, True])
def test_truncated_data_file_is_an_error_not_a_signal(tmp_path: Path, readonly: bool) -> None:
    directory = made(tmp_path / "s")
    data = directory / DATA_FILE
    whole = data.stat().st_size
    header = check_data_file(directory)
    assert header.used_bytes <= whole
    for size in (header.page_size * 2 + 100, header.used_bytes - 1, 10):
        os.truncate(data, size)
        opened = open_elsewhere(directory, readonly=readonly)
        assert opened.returncode == 0, opened.stderr  # a SIGBUS would be -7
        assert opened.stdout.startswith(StoreDamaged.code), opened.stdout
        assert ("truncated" in opened.stdout or "too short" in opened.stdout)


def test_foreign_bytes_are_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / DATA_FILE).write_bytes(b"not a store at all " * 1000)
    with pytest.raises(StoreDamaged, match="meta page"):
        LmdbStore.open(tmp_path / "s")


def test_a_healthy_store_passes_the_file_check_and_reopens(tmp_path: Path) -> None:
    directory = made(tmp_path / "s")
    assert check_data_file(directory).used_bytes <= (directory / DATA_FILE).stat().st_size
    store = LmdbStore.open(directory)
    with store.read() as tx:
        assert tx.session(CHILD) is not None
    store.close()


def test_log_on_an_empty_data_file_reports_it_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treemail.adapters.ui.cli import main

    directory = made(tmp_path / "s")
    (directory / DATA_FILE).write_bytes(b"")
    (directory / LOCK_FILE).unlink()
    before = listing(directory)
    assert main(["log", str(directory)]) == 2
    assert StoreDamaged.code in capsys.readouterr().err
    assert listing(directory) == before


def test_a_reader_follows_the_writer_past_map_growth(tmp_path: Path) -> None:
    from treemail.testing.store_sample import message

    writer = LmdbStore.open(tmp_path / "s", sync=False, map_size=64 * 1024)
    writer.transact(lambda tx: tx.add(CounterName("n"), 1))
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from treemail.adapters.store.lmdb_store import LmdbStore
        store = LmdbStore.open({str(tmp_path / "s")!r}, readonly=True)
        with store.read() as tx:
            print(tx.count("n"), flush=True)
        sys.stdin.readline()
        with store.read() as tx:
            print(len(list(tx.pending({CHILD!r}))), flush=True)
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).parents[2])
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "1"
        for n in range(60):  # ~240 KB: the writer's map grows past the reader's

            def put(tx: WriteTxn, n: int = n) -> None:
                tx.put_message(message(f"m{n}", CHILD, n, body="x" * 4000))

            writer.transact(put)
        out, err = reader.communicate("go\n", timeout=60)
        assert out.strip() == "60", err
    finally:
        reader.kill()
        writer.close()
