"""The command line: the demo's own check, and log replay of the store it leaves behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from treemail.adapters.cli import main


def test_demo_delivers_every_message_exactly_once_and_the_log_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert main(["demo", "--path", str(store)]) == 0
    demo = capsys.readouterr().out
    assert "each exactly once" in demo and "MISMATCH" not in demo
    for scene in ("steers it", "Siblings", "wakes it", "Crash", "recovery"):
        assert scene in demo
    assert main(["log", str(store)]) == 0
    replay = capsys.readouterr().out.splitlines()
    # The replay holds every event the demo showed live, and the live rows are a subset.
    live = [line for line in demo.splitlines() if line.startswith("  ") and "#" in line]
    assert sorted(live) == sorted(replay)


def test_log_of_a_missing_store_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["log", str(tmp_path / "nothing")]) == 2
    assert "no store at" in capsys.readouterr().err
