"""send_message arguments together with the tool-call id, on both stores: success or a typed
error, and a refusal leaves the store exactly as it was."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import TALLY
from tests.fuzz.strategies import TEXT, arguments
from tests.unit.conftest import World, open_store
from treemail.core.errors import TreemailError
from treemail.core.records import ToolContext

RULES = {"*": "allow"}


@pytest.fixture(scope="module", params=["memory", "lmdb"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextmanager
def fresh_world(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A new store per example. One store for the whole module grew by a tree per example,
    and the two whole-store snapshots of each example made the run quadratic (192 s on LMDB
    for 200 examples); no example reads what an earlier one wrote."""
    store = open_store(kind, Path(tmp_path_factory.mktemp("fuzz")))
    try:
        yield World(store)
    finally:
        store.close()


@given(args=arguments("send_message"), call_id=TEXT, data=st.data())
def test_send_message_arguments_and_call_ids(kind: str, tmp_path_factory: pytest.TempPathFactory,
                                            args: Any, call_id: str,
                                            data: st.DataObject) -> None:
    with fresh_world(kind, tmp_path_factory) as world:
        _send_once(world, args, call_id, data)


def _send_once(world: World, args: Any, call_id: str, data: st.DataObject) -> None:
    root = world.root("root", RULES)
    kid = world.child(root, "kid", RULES)
    if isinstance(args, dict) and data.draw(st.booleans(), label="aim at the kid"):
        args = {**args, "to": kid.reference}
    ctx = ToolContext(root.session_id, world.activate(root).run_id, call_id)
    # The snapshot reads the call's counters and replay entry by keys built from its id,
    # whatever the id: a key no store could hold reads as absent.
    before = world.snapshot(ctx)
    try:
        world.engine.send_message(ctx, args)
    except TreemailError as exc:
        TALLY["send_message"][f"typed error {exc.code}"] += 1
        # A store failure is typed but says the input got past validation into a key or
        # record the store cannot hold: hostile arguments must be refused before that.
        assert not exc.code.startswith("store:"), str(exc)
        assert world.snapshot(ctx) == before, exc.code
    else:
        TALLY["send_message"]["sent"] += 1
