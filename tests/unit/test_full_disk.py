"""A full disk: every send either commits and is acknowledged, or fails typed and leaves no
trace; an I/O error after the commit point is reported as an unknown outcome, and a retry with
the same tool-call id is answered by the idempotency index.

The disk is a real 4 MiB tmpfs when this process may mount one (it runs as root in CI); the
bounded map (no growth past ``max_map_size``) reaches the same "full" from inside LMDB and
runs everywhere, so neither mechanism is left untested where the other is unavailable.
"""

from __future__ import annotations

import io
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tests.unit.conftest import World, arguments
from treemail.adapters.store import lmdb_store
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.store.verify import main as verify_main
from treemail.core.engine import Engine
from treemail.core.errors import OutcomeUnknown, StoreFull
from treemail.core.ids import CountingIds
from treemail.core.keys import CounterName
from treemail.core.records import SendResult, ToolContext

BODY = "b" * 1500


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip()}); "
                    "test_bounded_map_full_sends_are_acked_or_traceless covers the full path")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def sender(store: LmdbStore) -> tuple[World, ToolContext, str]:
    world = World(store)
    world.configure(max_pending_per_session=1_000_000, max_inflight_per_pair=0)
    lead = world.root("lead", {"*": "allow"})
    kid = world.child(lead, "kid", {"*": "allow"})
    ctx = world.ctx(lead, "call-0")
    return world, ctx, kid.reference


def fill(world: World, ctx: ToolContext, to: str) -> tuple[dict[str, str], int]:
    """Send until the store refuses 20 sends in a row; each refusal must change nothing."""
    acked: dict[str, str] = {}
    refused = in_a_row = 0
    for n in range(1, 20_000):
        call = ToolContext(ctx.session_id, ctx.run_id, f"send-{n}")
        before = _footprint(world)
        try:
            result = world.engine.send_message(call, arguments(to, f"{n} {BODY}"))
        except StoreFull as exc:
            assert "nothing" in exc.message
            assert _footprint(world) == before, "a refused send left a trace"
            refused, in_a_row = refused + 1, in_a_row + 1
            if in_a_row >= 20:
                break
            continue
        in_a_row = 0
        acked[call.tool_call_id] = result.message_id
    return acked, refused


def _footprint(world: World) -> tuple[int, int]:
    with world.store.read() as tx:
        return tx.feed_end(), tx.count(CounterName("sessions"))


def stored_matches(engine: Engine, acked: dict[str, str], to: str) -> None:
    """The recipient holds exactly the acknowledged sends, each once, with its own body."""
    kid = next(s for s in engine.sessions() if s.reference == to)
    pending = [m for m in engine.pending(kid.session_id) if m.body.endswith(BODY)]
    assert sorted(m.message_id for m in pending) == sorted(acked.values())
    numbers = sorted(int(m.body.split(" ")[0]) for m in pending)
    assert numbers == sorted(int(call.split("-")[1]) for call in acked)


def test_tmpfs_full_sends_are_acked_or_traceless(tiny_fs: Path) -> None:
    store = LmdbStore.open(tiny_fs / "store")
    world, ctx, to = sender(store)
    acked, refused = fill(world, ctx, to)
    assert len(acked) > 100 and refused >= 20
    stored_matches(world.engine, acked, to)
    store.close()
    # After a restart on the still-full disk: the same messages, and a sound store.
    again = LmdbStore.open(tiny_fs / "store")
    stored_matches(Engine(again, CountingIds(namespace=1)), acked, to)
    again.close()
    out = io.StringIO()
    assert verify_main(str(tiny_fs / "store"), out, out) == 0, out.getvalue()


def test_bounded_map_full_sends_are_acked_or_traceless(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "store", sync=False, map_size=2 << 20,
                           max_map_size=2 << 20)
    world, ctx, to = sender(store)
    acked, refused = fill(world, ctx, to)
    assert len(acked) > 100 and refused >= 20
    stored_matches(world.engine, acked, to)
    store.close()


def test_io_error_after_the_commit_point_is_an_unknown_outcome_and_the_retry_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LmdbStore.open(tmp_path / "store", sync=False)
    world, ctx, to = sender(store)
    real = lmdb_store._commit_durably

    def commit_then_fail(txn: Any) -> None:
        real(txn)
        raise lmdb.Error("mdb_env_sync: Input/output error")

    monkeypatch.setattr(lmdb_store, "_commit_durably", commit_then_fail)
    call = ToolContext(ctx.session_id, ctx.run_id, "send-once")
    with pytest.raises(OutcomeUnknown, match="same tool-call id") as caught:
        world.engine.send_message(call, arguments(to, "once"))
    assert caught.value.code == OutcomeUnknown.code
    monkeypatch.setattr(lmdb_store, "_commit_durably", real)
    retried = world.engine.send_message(call, arguments(to, "once"))
    assert isinstance(retried, SendResult)
    kid = next(s for s in world.engine.sessions() if s.reference == to)
    sent = [m.message_id for m in world.engine.pending(kid.session_id) if m.body == "once"]
    assert sent == [retried.message_id]  # stored once, and the retry answered with it
    store.close()


@pytest.mark.parametrize("failure", [
    lmdb.DiskError("mdb_txn_commit: No space left on device"),
    # What a full disk gives when a data page is written short.
    lmdb.Error("mdb_txn_commit: Input/output error"),
])
def test_an_io_error_before_the_commit_point_is_full_or_failed_never_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: lmdb.Error
) -> None:
    store = LmdbStore.open(tmp_path / "store", sync=False)
    world, ctx, to = sender(store)

    def refuse(txn: Any) -> None:
        txn.abort()  # the commit point is never reached
        raise failure

    monkeypatch.setattr(lmdb_store, "_commit_durably", refuse)
    before = _footprint(world)
    with pytest.raises(StoreFull, match="nothing"):
        world.engine.send_message(ToolContext(ctx.session_id, ctx.run_id, "x"),
                                  arguments(to, "never"))
    assert _footprint(world) == before
    store.close()
