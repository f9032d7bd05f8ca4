"""spec/bindings is generated from the wire types and pinned to PROTOCOL_VERSION."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from treemail.adapters.daemon import bindings
from treemail.protocol.bindings import SCHEMA_FILE, TYPESCRIPT_FILE, schema_bundle
from treemail.protocol.methods import METHODS, NOTIFICATIONS, PROTOCOL_VERSION

COMMITTED = Path(__file__).parents[2] / "spec" / "bindings"


def test_the_committed_bindings_are_the_generated_ones() -> None:
    assert PROTOCOL_VERSION == 19
    assert bindings.check(COMMITTED) == []


def test_every_method_notification_and_event_has_a_schema() -> None:
    bundle = schema_bundle()
    assert set(bundle["methods"]) == set(METHODS)
    assert set(bundle["notifications"]) == set(NOTIFICATIONS)
    for entry in bundle["methods"].values():
        for side in ("params", "result"):
            assert entry[side]["$ref"].rsplit("/", 1)[-1] in bundle["$defs"]
    accepted = bundle["events"]["ProducerMessageAccepted"]
    assert "agent_hop" in accepted["properties"]


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "bindings"
    shutil.copytree(COMMITTED, target)
    return target


def test_a_stale_file_fails_naming_the_command_that_rewrites_it(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    (copy / TYPESCRIPT_FILE).write_text("// edited by hand\n")
    problems = bindings.check(copy)
    assert any("just write-bindings" in p for p in problems)
    assert any(TYPESCRIPT_FILE in p for p in problems)
    assert bindings.write(copy) is None  # same wire types: rewriting is allowed
    assert bindings.check(copy) == []


def test_changed_wire_types_without_a_version_bump_fail(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    # As if the types had been different when version 19 was pinned.
    (copy / bindings.FINGERPRINTS).write_text(json.dumps({"19": "0" * 64}))
    problems = bindings.check(copy)
    assert any("bump PROTOCOL_VERSION" in p for p in problems)
    refused = bindings.write(copy)
    assert refused is not None and "--amend" in refused
    assert json.loads((copy / bindings.FINGERPRINTS).read_text()) == {"19": "0" * 64}
    assert bindings.write(copy, amend=True) is None
    assert bindings.check(copy) == []


def test_a_missing_schema_file_is_reported(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    (copy / SCHEMA_FILE).unlink()
    assert any("missing" in p for p in bindings.check(copy))
