"""The LMDB store's file checks and owner lock, to the letter: the header's every check on a
``data.mdb`` made byte by byte (page sizes LMDB builds use, the newer of the two meta pages,
the sizes at each bound), the messages a damaged file and a held store give, and what the
owner lock file holds."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from treemail.adapters.store.lmdb_files import DATA_FILE, OWNER_FILE, Header, check_data_file
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.errors import StoreDamaged, StoreLocked, StoreMissing, StoreNotPrivate

MAGIC, VERSION = 0xBEEFC0DE, 1


def meta_page(page_size: int, *, map_size: int = 1 << 20, last_page: int = 1, txn_id: int = 1,
              magic: int = MAGIC, version: int = VERSION, size: int | None = None) -> bytes:
    """One LMDB meta page (64-bit, little-endian): a 16-byte page header, magic, version, the
    map address, map size, the free database record (its first field: the page size), the
    main database record, the last page used, the transaction id."""
    body = (magic.to_bytes(4, "little") + version.to_bytes(4, "little") + bytes(8)
            + map_size.to_bytes(8, "little") + (size or page_size).to_bytes(4, "little")
            + bytes(44) + bytes(48) + last_page.to_bytes(8, "little")
            + txn_id.to_bytes(8, "little"))
    return (bytes(16) + body).ljust(page_size, b"\x00")


def data_file(directory: Path, *pages: bytes, length: int | None = None) -> Path:
    directory.mkdir(exist_ok=True)
    raw = b"".join(pages)
    (directory / DATA_FILE).write_bytes(raw if length is None else raw[:length].ljust(length,
                                                                                     b"\x00"))
    return directory


def refusal(directory: Path) -> str:
    with pytest.raises(StoreDamaged) as refused:
        check_data_file(directory)
    path = str(directory / DATA_FILE)
    assert refused.value.details == {"path": path}
    prefix = f"the store file {path!r} is damaged: "
    suffix = ". Restore the store from a copy; treemail will not open it as an empty store."
    assert refused.value.message.startswith(prefix) and refused.value.message.endswith(suffix)
    return refused.value.message[len(prefix):-len(suffix)]


@pytest.mark.parametrize("page_size", [512, 4096, 1 << 16], ids=["512", "4K", "64K"])
@pytest.mark.parametrize("newer", [0, 1], ids=["newer first", "newer second"])
def test_every_page_size_lmdb_builds_use_is_read_and_the_newer_meta_page_wins(
        tmp_path: Path, page_size: int, newer: int) -> None:
    # LMDB alternates its two meta pages; the one with the higher transaction id is current,
    # and its map size is the one a reader must map.
    metas = [dict(map_size=1 << 20, last_page=3, txn_id=7),
             dict(map_size=1 << 21, last_page=5, txn_id=8)]
    if newer == 0:
        metas.reverse()
    directory = data_file(tmp_path / "s", *(meta_page(page_size, **m) for m in metas),
                          length=6 * page_size)
    assert check_data_file(directory) == Header(page_size, 1 << 21, 5, 8)


def test_a_file_as_long_as_its_header_describes_is_whole(tmp_path: Path) -> None:
    directory = data_file(tmp_path / "s", meta_page(4096, last_page=2),
                          meta_page(4096, last_page=1), length=3 * 4096)
    assert check_data_file(directory).used_bytes == 3 * 4096


def test_the_longer_of_the_two_descriptions_is_the_size_needed(tmp_path: Path) -> None:
    # The older meta page may describe more pages than the newer (a commit that freed
    # pages): the file must hold them all before LMDB maps it.
    directory = data_file(tmp_path / "s", meta_page(4096, last_page=4, txn_id=1),
                          meta_page(4096, last_page=2, txn_id=2), length=4 * 4096)
    assert refusal(directory) == (f"it is {4 * 4096} bytes but its header describes "
                                  f"{5 * 4096}: the file was truncated")


def test_a_file_ending_right_after_the_second_meta_page_s_fields_is_truncated(
        tmp_path: Path) -> None:
    size = 4096 + 152  # both meta pages' fields are there; the pages they describe are not
    directory = data_file(tmp_path / "s", meta_page(4096), meta_page(4096), length=size)
    assert refusal(directory) == (f"it is {size} bytes but its header describes {2 * 4096}: "
                                  "the file was truncated")


@pytest.mark.parametrize("length", [100, 4096 + 151])
def test_a_file_too_short_for_its_meta_pages_says_how_long_it_is(
        tmp_path: Path, length: int) -> None:
    directory = data_file(tmp_path / "s", meta_page(4096), meta_page(4096), length=length)
    assert refusal(directory) == f"it is {length} bytes, too short for its meta pages"


@pytest.mark.parametrize(("first", "second", "said"), [
    (dict(magic=MAGIC + 1), {}, "the meta page at byte 0 is not an LMDB meta page"),
    (dict(version=2), {}, "the meta page at byte 0 is not an LMDB meta page"),
    ({}, dict(version=0), "the meta page at byte 4096 is not an LMDB meta page"),
    (dict(size=3000), {}, "the meta page at byte 0 gives page size 3000"),
    (dict(size=256), {}, "the meta page at byte 0 gives page size 256"),
    (dict(size=1 << 17), {}, f"the meta page at byte 0 gives page size {1 << 17}"),
    ({}, dict(size=8192), "its two meta pages disagree on the page size"),
], ids=["magic", "version", "second version", "not a power of two", "below 512",
        "above 64K", "disagree"])
def test_each_header_check_names_the_page_and_the_fault(
        tmp_path: Path, first: dict[str, int], second: dict[str, int], said: str) -> None:
    directory = data_file(tmp_path / "s", meta_page(4096, **first), meta_page(4096, **second),
                          length=1 << 18)
    assert refusal(directory) == said


def test_an_empty_data_file_is_named_empty(tmp_path: Path) -> None:
    directory = data_file(tmp_path / "s", length=0)
    assert refusal(directory) == "it is empty (0 bytes), so it holds no store"


def test_a_data_file_that_cannot_be_read_is_damage_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "s" / DATA_FILE).mkdir(parents=True)  # a directory where the file should be
    assert refusal(tmp_path / "s").startswith("it cannot be read: [Errno 21] Is a directory")


def test_no_data_file_is_a_missing_store_named_with_its_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing) as missing:
        check_data_file(tmp_path)
    assert missing.value.message == f"no store at {str(tmp_path)!r} (no data.mdb in it)"
    assert missing.value.details == {"path": str(tmp_path)}


# -- the owner lock ------------------------------------------------------------------------


@pytest.fixture
def held(tmp_path: Path) -> Iterator[LmdbStore]:
    store = LmdbStore.open(tmp_path / "db", sync=False)
    yield store
    store.close()


def refused_writer(directory: Path) -> StoreLocked:
    with pytest.raises(StoreLocked) as refused:
        LmdbStore.open(directory)
    return refused.value


def test_a_holder_that_describes_nothing_is_another_process_with_its_pid(
        held: LmdbStore, tmp_path: Path) -> None:
    refused = refused_writer(tmp_path / "db")
    assert refused.message == (
        f"the store at {str(tmp_path / 'db')!r} is in use by another process "
        f"(pid {os.getpid()}); stop it first, or open the store read-only to look at it")
    assert refused.details == {"path": str(tmp_path / "db"), "pid": str(os.getpid()),
                               "holder": {}}


def test_the_owner_file_holds_only_the_latest_description(held: LmdbStore,
                                                           tmp_path: Path) -> None:
    held.own({"role": "daemon", "socket": "/run/a-long-socket-path.sock", "note": "x" * 50})
    held.own({"role": "tui"})
    owner = tmp_path / "db" / OWNER_FILE
    assert owner.read_text() == f"{os.getpid()}\n" + json.dumps({"role": "tui"}) + "\n"
    assert owner.stat().st_mode & 0o777 == 0o600  # private: it names our socket
    refused = refused_writer(tmp_path / "db")
    assert refused.details["holder"] == {"role": "tui"}
    assert f"is in use by tui (pid {os.getpid()});" in refused.message
    held.own({})
    assert owner.read_text() == f"{os.getpid()}\n"


def test_a_holder_s_every_detail_but_its_role_is_listed_after_its_pid(
        held: LmdbStore, tmp_path: Path) -> None:
    held.own({"socket": "/run/t.sock", "role": "daemon", "http": "127.0.0.1:8765"})
    assert f"is in use by daemon (pid {os.getpid()}, socket /run/t.sock, http 127.0.0.1:8765);" \
        in refused_writer(tmp_path / "db").message


@pytest.mark.parametrize(("text", "pid", "holder"), [
    (b"", "unknown", {}),
    (b"not a pid\n", "unknown", {}),
    (b"  42  \n{not json\n", "42", {}),
    (b"42\n[\"a list\"]\n", "42", {}),
    (b"42\n{\"role\": \"daemon\", \"port\": 7}\n", "42", {"role": "daemon", "port": "7"}),
    (b"42\n{\"role\": \"d\xffmon\"}\n", "42", {"role": "d\ufffdmon"}),
], ids=["empty", "no pid", "bad json", "not an object", "values as text", "not utf-8"])
def test_an_owner_file_in_any_state_still_gives_a_refusal_that_reads(
        tmp_path: Path, text: bytes, pid: str, holder: dict[str, str]) -> None:
    # Whatever holds the lock wrote the file (or was cut off writing it): the refused opener
    # still says what it can, never fails on the file's contents.
    directory = tmp_path / "db"
    LmdbStore.open(directory, sync=False).close()
    fd = os.open(directory / OWNER_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
        refused = refused_writer(directory)
    finally:
        os.close(fd)
    assert (refused.details["pid"], refused.details["holder"]) == (pid, holder)
    assert f"(pid {pid}" in refused.message
    LmdbStore.open(directory, sync=False).close()  # the lock went with the descriptor


def _modes(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mode & 0o777 for path in [directory, *directory.iterdir()]}


def test_a_new_store_is_private_from_its_first_open_under_the_usual_umask(
        tmp_path: Path) -> None:
    """LMDB creates ``data.mdb`` and ``lock.mdb`` itself, with the mode the store gives it:
    0644 by LMDB's default under umask 022, readable by every local user until the next
    open repaired it."""
    old = os.umask(0o022)
    try:
        LmdbStore.open(tmp_path / "db", sync=False).close()
    finally:
        os.umask(old)
    assert _modes(tmp_path / "db") == {"db": 0o700, DATA_FILE: 0o600, "lock.mdb": 0o600,
                                       OWNER_FILE: 0o600}


def not_treemails(directory: Path) -> Path:
    """A directory open to others (0755) holding a user's file (0644), and no store."""
    directory.mkdir()
    directory.chmod(0o755)
    (directory / "notes.txt").write_text("the user's own\n")
    (directory / "notes.txt").chmod(0o644)
    return directory


def test_a_directory_open_to_others_that_holds_no_store_is_refused_and_left_as_it_was(
        tmp_path: Path) -> None:
    """Only a directory holding a store (its ``data.mdb``) is treemail's to make private."""
    directory = not_treemails(tmp_path / "home")
    with pytest.raises(StoreNotPrivate) as refused:
        LmdbStore.open(directory, sync=False)
    assert "holds files that are not treemail's" in refused.value.message
    assert _modes(directory) == {"home": 0o755, "notes.txt": 0o644}  # nothing made, no chmod
