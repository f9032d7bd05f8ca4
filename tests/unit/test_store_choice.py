"""Stores chosen by URL: one factory maps a store's address onto a backend, and nothing
above the store wing names a backend, a backend's module or one of its files."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess
from treemail import open_engine, open_store
from treemail.adapters.daemon.errors import DataDirLocked
from treemail.adapters.store.errors import StoreUrlUnknown
from treemail.adapters.store.factory import FORMS, Kind, StoreUrl, holds_store, parse
from treemail.adapters.ui.cli import main
from treemail.core.errors import StoreMissing
from treemail.core.memory_store import MemoryStore
from treemail.core.records import AgentSpec, Owner

PACKAGE = Path(__file__).resolve().parents[2] / "treemail"
STORE_WING = PACKAGE / "adapters" / "store"

# What only the store wing may say: the backends' classes, modules and drivers, and the
# names of their files. (``MemoryStore`` is the core's pure reference store, not an adapter.)
_BACKEND_WORDS = re.compile(
    r"\b(LmdbStore|PostgresStore|lmdb_store|lmdb_txn|lmdb_files|lmdb_format|postgres_store|"
    r"postgres_schema)\b|data\.mdb|lock\.mdb|owner\.lock")
_DRIVERS = ("lmdb", "psycopg", "psycopg_pool")


def _outside_the_wing() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if STORE_WING not in path.parents and path.parent.name != "testing"]


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(PACKAGE)))
                                  for p in _outside_the_wing()])
def test_nothing_outside_the_store_wing_names_a_backend(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    named = sorted({m.group(0) for m in _BACKEND_WORDS.finditer(text)})
    assert named == [], f"{path.name} names {named}: open stores through the factory"
    drivers = sorted(
        alias.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Import)
        for alias in node.names if alias.name.split(".")[0] in _DRIVERS) + sorted(
        node.module for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.ImportFrom) and node.module
        and node.module.split(".")[0] in _DRIVERS)
    assert drivers == [], f"{path.name} imports a store driver: {drivers}"


def test_the_guard_catches_a_module_that_names_a_backend() -> None:
    # The check above must be able to fail: it sees each way of naming a backend.
    for text in ("from treemail.adapters.store.lmdb_store import LmdbStore",
                 'if (store / "data.mdb").exists(): pass', "x = PostgresStore"):
        assert _BACKEND_WORDS.search(text), text


# -- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "expected"), [
    ("/var/lib/treemail/store", StoreUrl(Kind.LMDB, "/var/lib/treemail/store")),
    ("relative/store", StoreUrl(Kind.LMDB, "relative/store")),
    ("./a:b", StoreUrl(Kind.LMDB, "./a:b")),
    ("lmdb:/srv/store", StoreUrl(Kind.LMDB, "/srv/store")),
    ("lmdb:a:b", StoreUrl(Kind.LMDB, "a:b")),
    ("memory:", StoreUrl(Kind.MEMORY, "")),
    ("postgresql://u@h:5433/db?schema=s", StoreUrl(Kind.POSTGRESQL,
                                                   "postgresql://u@h:5433/db?schema=s")),
    ("postgres:///db", StoreUrl(Kind.POSTGRESQL, "postgres:///db")),
    (Path("a:b"), StoreUrl(Kind.LMDB, "a:b")),  # a Path is always a path
])
def test_every_accepted_form_parses(url: str | Path, expected: StoreUrl) -> None:
    assert parse(url) == expected


@pytest.mark.parametrize("url", ["redis://localhost", "a:b", "sqlite:x.db", "memory:x",
                                 "lmdb:", ""])
def test_an_unknown_form_is_a_typed_error_listing_the_accepted_ones(url: str) -> None:
    with pytest.raises(StoreUrlUnknown) as caught:
        open_store(url)
    assert caught.value.code == StoreUrlUnknown.code
    assert all(form in caught.value.message for form in FORMS)
    assert caught.value.details["forms"] == list(FORMS)


def test_a_server_password_never_reaches_a_message() -> None:
    from treemail.adapters.store.factory import shown

    assert shown("postgresql://u:s3cret@h/db?schema=x") == "postgresql://u:***@h/db?schema=x"
    assert shown("postgresql://u@h/db") == "postgresql://u@h/db"
    assert shown("/srv/a:b@c") == "/srv/a:b@c"


def test_the_write_connections_of_a_shared_postgresql_store_come_from_the_url() -> None:
    from treemail.adapters.store.postgres_store import WRITERS, split_url, url_writers

    url = "postgresql://u:s3cret@h/db?schema=x&writers=3&sslmode=disable"
    assert url_writers(url) == 3
    assert url_writers("postgresql://u@h/db") == WRITERS
    assert split_url(url) == ("postgresql://u:s3cret@h/db?sslmode=disable", "x")  # not libpq's
    for bad in ("0", "65", "two", ""):
        with pytest.raises(StoreUrlUnknown) as caught:
            url_writers(f"postgresql://u:s3cret@h/db?writers={bad}")
        assert caught.value.message == (
            "cannot open a store at 'postgresql://u:***@h/db?writers=" + bad + "': writers "
            f"must be a number from 1 to 64, not {bad!r}")


def test_an_unknown_form_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreUrlUnknown):
        open_store("a:b")
    assert list(tmp_path.iterdir()) == []


# -- opening -------------------------------------------------------------------------------


def test_a_path_and_lmdb_path_open_the_same_store(tmp_path: Path) -> None:
    engine = open_engine(str(tmp_path / "s"), sync=False)
    root = engine.create_root(AgentSpec("lead", "plans"))
    engine.store.close()
    assert holds_store(tmp_path / "s") and holds_store(f"lmdb:{tmp_path / 's'}")
    again = open_engine(f"lmdb:{tmp_path / 's'}", sync=False)
    try:
        assert again.session(root.session_id) == root
    finally:
        again.store.close()


def test_memory_is_a_working_store_of_its_own() -> None:
    engine = open_engine("memory:")
    root = engine.create_root(AgentSpec("lead", "plans"))
    engine.accept(root.session_id, "hello", Owner.USER)
    assert isinstance(engine.store, MemoryStore)
    assert [m.body for m in engine.pending(root.session_id)] == ["hello"]
    assert not holds_store("memory:")
    other = open_store("memory:")
    with other.read() as tx:
        assert tx.session(root.session_id) is None  # each memory: store is its own


def test_reading_a_missing_store_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="no store at"):
        open_store(tmp_path / "none", readonly=True)
    assert not (tmp_path / "none").exists()


# -- the command line ------------------------------------------------------------------------


def _demo_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    store = tmp_path / "kept"
    assert main(["demo", "--store", f"lmdb:{store}"]) == 0
    capsys.readouterr()
    return store


def test_log_and_verify_take_a_store_url_as_they_take_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _demo_store(tmp_path, capsys)
    assert main(["log", str(store)]) == 0
    by_path = capsys.readouterr().out
    assert main(["log", "--store", f"lmdb:{store}"]) == 0
    assert capsys.readouterr().out == by_path and "lead" in by_path
    assert main(["verify", "--store", f"lmdb:{store}"]) == 0
    assert "no damage found" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["log", "verify"])
def test_log_and_verify_want_one_store(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in ([command, str(tmp_path), "--store", "memory:"],
                 [command, str(tmp_path), "--data-dir", str(tmp_path)],
                 [command, "--store", "memory:", "--data-dir", str(tmp_path)]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
        assert "one of them" in capsys.readouterr().err


def test_a_bad_store_url_on_the_command_line_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["log", "--store", "redis://x"]) == 2
    err = capsys.readouterr().err
    assert StoreUrlUnknown.code in err and "Traceback" not in err
    assert main(["verify", "--store", "memory:"]) == 2
    assert "keeps no stored bytes" in capsys.readouterr().err


def test_the_demo_refuses_memory_and_a_used_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--store", "memory:"])
    assert caught.value.code == 2 and "memory:" in capsys.readouterr().err
    store = _demo_store(tmp_path, capsys)
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--store", f"lmdb:{store}"])
    assert caught.value.code == 2 and "not empty" in capsys.readouterr().err


def test_the_tui_replays_the_store_a_url_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treemail.adapters.ui.tui.sources import StoreSource, choose

    store = _demo_store(tmp_path, capsys)
    source = choose(tmp_path / "no-data-dir", None, None, f"lmdb:{store}")
    assert isinstance(source, StoreSource) and source.where == f"lmdb:{store}"


def test_a_daemon_serves_the_store_given_by_url(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"
    daemon = DaemonProcess(tmp_path / "data", "--store", f"lmdb:{store}")
    try:
        assert holds_store(store)
        assert not (tmp_path / "data" / "store").exists()  # the default store is not made
        done = subprocess.run(  # a second daemon, of another directory, on the same store
            [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(tmp_path / "other"),
             "--store", str(store)],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, done.stderr
        assert DataDirLocked.code in done.stderr
        assert f"pid {daemon.proc.pid}" in done.stderr and "another daemon" in done.stderr
        assert f"the store {store}" in done.stderr and "another --store" in done.stderr
    finally:
        code, err = daemon.terminate()
    assert code == 0, err
