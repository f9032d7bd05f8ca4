"""spec/bindings is generated from the wire types, and held to the pinned protocol version:
breaking differences fail, additive ones must be in the protocol changelog."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from treemail.adapters.daemon import bindings
from treemail.adapters.daemon.views import approval_view
from treemail.core import events
from treemail.core.records import Approval, ApprovalState
from treemail.core.results import CallOutcome
from treemail.protocol.bindings import SCHEMA_FILE, TYPESCRIPT_FILE, schema_bundle
from treemail.protocol.compat import ADDITIVE, BREAKING, compare
from treemail.protocol.methods import METHODS, NOTIFICATIONS, PROTOCOL_VERSION
from treemail.protocol.types import PAGE_LIMIT

SPEC = Path(__file__).parents[2] / "spec"
COMMITTED = SPEC / "bindings"


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


def _validator(bundle: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    root = {"$defs": bundle["$defs"], "events": bundle["events"], "$ref": f"#/$defs/{name}"}
    return jsonschema.Draft202012Validator(root)


def test_states_are_enums_and_the_event_view_is_discriminated_by_kind() -> None:
    bundle = schema_bundle()
    defs = bundle["$defs"]
    assert defs["SessionView"]["properties"]["state"] == {"$ref": "#/$defs/SessionState"}
    assert set(defs["SessionState"]["enum"]) == {"idle", "queued", "running", "finished"}
    for view, field in [("ProducerAccepted", "recipient_state"), ("ProducerAccepted", "owner"),
                        ("MessageView", "mode"), ("RunView", "status")]:
        assert "enum" in defs[defs[view]["properties"][field]["$ref"].rsplit("/", 1)[-1]]
    event = _validator(bundle, "EventView")
    good = {"number": 1, "session_id": "s", "seq": 1, "kind": "DelegationCompleted",
            "data": {"message_id": "m"}}
    assert event.is_valid(good)
    assert not event.is_valid({**good, "data": {"message_id": 7}})  # the kind's data schema
    assert not event.is_valid({**good, "kind": "RunStarted"})  # another kind's data


def test_error_data_and_frames_are_in_the_bundle() -> None:
    bundle = schema_bundle()
    error = _validator(bundle, "ErrorResponse")
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": 3, "error": {
        "code": -32602, "message": "m", "data": {"code": "rpc:invalid_params"}}}
    assert error.is_valid(frame)
    assert not error.is_valid({**frame, "error": {**frame["error"], "data": {"code": "x:y"}}})
    assert set(bundle["frames"]) == {"request", "response", "error_response", "notification"}
    assert _validator(bundle, "RequestFrame").is_valid(
        {"jsonrpc": "2.0", "id": "a", "method": "session.get", "params": {"session_id": "s"}})


def test_an_approval_view_carries_its_outcome_as_the_event_records_it() -> None:
    for outcome in (CallOutcome.ok({"message_id": "m"}),
                    CallOutcome(error="permission:denied", message="no")):
        held = Approval(approval_id="a", session_id="s", run_id="r", tool_call_id="c",
                        tool="send_message", arguments={}, label="l",
                        state=ApprovalState.APPROVED, scope="once", outcome=outcome)
        view = msgspec.to_builtins(approval_view(held))
        answered = events.ApprovalAnswered("a", ApprovalState.APPROVED, "once", outcome)
        assert view["outcome"] == events.encode(answered)["outcome"]
    bundle = schema_bundle()
    recorded = bundle["events"]["ApprovalAnswered"]["properties"]["outcome"]
    sample = {"result": None, "error": "permission:denied", "message": "no"}
    assert jsonschema.Draft202012Validator(recorded).is_valid(sample)
    assert _validator(bundle, "ApprovalOutcome").is_valid(sample)


# -- additive or breaking, against the pinned bundle ---------------------------------------


Bundle = dict[str, Any]

def _method_removed(new: Bundle, defs: Bundle) -> None:
    del new["methods"]["run.get"]


def _field_renamed(new: Bundle, defs: Bundle) -> None:
    view = defs["RunView"]
    view["properties"]["state"] = view["properties"].pop("status")
    view["required"] = [f if f != "status" else "state" for f in view["required"]]


def _type_changed(new: Bundle, defs: Bundle) -> None:
    defs["RunView"]["properties"]["number"] = {"type": "string"}


def _new_required_params_field(new: Bundle, defs: Bundle) -> None:
    defs["SessionGetParams"]["properties"]["tree"] = {"type": "string"}
    defs["SessionGetParams"]["required"].append("tree")


def _enum_value_removed(new: Bundle, defs: Bundle) -> None:
    defs["SessionState"]["enum"].remove("idle")


def _event_kind_removed(new: Bundle, defs: Bundle) -> None:
    del new["events"]["RunStarted"]
    defs["EventView"]["oneOf"].remove({"$ref": "#/$defs/RunStartedEvent"})


def _bound_tightened(new: Bundle, defs: Bundle) -> None:
    defs["SessionListParams"]["properties"]["limit"]["maximum"] = 10


def _new_member_of_a_plain_union(new: Bundle, defs: Bundle) -> None:
    defs["SessionView"]["properties"]["handle"]["anyOf"].append({"type": "integer"})


def _new_method(new: Bundle, defs: Bundle) -> None:
    new["methods"]["run.peek"] = new["methods"]["run.get"]


def _new_event_kind(new: Bundle, defs: Bundle) -> None:
    new["events"]["RunPaused"] = new["events"]["RunStarted"]
    defs["RunPausedEvent"] = {**defs["RunStartedEvent"], "title": "RunPausedEvent"}
    defs["EventView"]["oneOf"].append({"$ref": "#/$defs/RunPausedEvent"})


def _new_optional_params_field(new: Bundle, defs: Bundle) -> None:
    defs["SessionGetParams"]["properties"]["verbose"] = {"type": "boolean"}


def _new_result_field(new: Bundle, defs: Bundle) -> None:
    defs["RunView"]["properties"]["cost"] = {"type": "integer"}
    defs["RunView"]["required"].append("cost")


def _new_enum_value_on_output(new: Bundle, defs: Bundle) -> None:
    defs["SessionState"]["enum"].append("paused")


# Each change a later wire type might make, to the current bundle.
_CHANGES = {
    "method removed": _method_removed,
    "field renamed": _field_renamed,
    "type changed": _type_changed,
    "new required params field": _new_required_params_field,
    "enum value removed": _enum_value_removed,
    "event kind removed": _event_kind_removed,
    "bound tightened": _bound_tightened,
    "new member of a plain union": _new_member_of_a_plain_union,
    "new method": _new_method,
    "new event kind": _new_event_kind,
    "new optional params field": _new_optional_params_field,
    "new result field": _new_result_field,
    "new enum value on output": _new_enum_value_on_output,
}


def _mutated(change: str) -> Bundle:
    """The current bundle with one change."""
    new = copy.deepcopy(schema_bundle())
    _CHANGES[change](new, new["$defs"])
    return new


@pytest.mark.parametrize(("change", "subject"), [
    ("method removed", "run.get"), ("field renamed", "RunView.status"),
    ("type changed", "RunView.number"), ("new required params field", "SessionGetParams.tree"),
    ("enum value removed", "SessionState: idle"), ("event kind removed", "RunStarted"),
    ("bound tightened", "SessionListParams.limit"),
    ("new member of a plain union", "SessionView.handle"),
])
def test_a_breaking_change_is_classified_breaking(change: str, subject: str) -> None:
    found = compare(schema_bundle(), _mutated(change))
    assert subject in {d.subject for d in found if d.kind == BREAKING}, found


@pytest.mark.parametrize(("change", "subject"), [
    ("new method", "run.peek"), ("new event kind", "RunPausedEvent"),
    ("new optional params field", "SessionGetParams.verbose"),
    ("new result field", "RunView.cost"), ("new enum value on output", "SessionState: paused"),
])
def test_an_additive_change_is_classified_additive_and_nothing_else(change: str,
                                                                    subject: str) -> None:
    found = compare(schema_bundle(), _mutated(change))
    assert [(d.kind, d.subject) for d in found] == [(ADDITIVE, subject)], found


def test_the_same_bundle_has_no_difference() -> None:
    assert compare(schema_bundle(), schema_bundle()) == []


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "spec" / "bindings"
    shutil.copytree(COMMITTED, target)
    shutil.copy(SPEC / bindings.CHANGELOG, target.parent / bindings.CHANGELOG)
    return target


def _pin(directory: Path, pinned: dict[str, Any]) -> None:
    bindings.pinned_path(directory).write_text(json.dumps(pinned))


def test_an_addition_passes_only_once_the_changelog_names_it(tmp_path: Path) -> None:
    copy_ = _copy(tmp_path)
    pinned = schema_bundle()
    del pinned["methods"]["run.list"]  # as if run.list came after 19 was pinned
    _pin(copy_, pinned)
    problems = bindings.check(copy_)
    assert len(problems) == 1 and "`run.list`" in problems[0], problems
    assert "not in the protocol changelog" in problems[0]
    changelog = copy_.parent / bindings.CHANGELOG
    changelog.write_text(changelog.read_text() + "- new method `run.list`\n")
    assert bindings.check(copy_) == []
    # Named under another version's heading, it does not count.
    changelog.write_text(changelog.read_text().replace(
        "- new method `run.list`\n", "") + "\n## Protocol 18\n\n- `run.list`\n")
    assert len(bindings.check(copy_)) == 1


def test_a_breaking_change_fails_and_is_written_only_with_amend(tmp_path: Path) -> None:
    copy_ = _copy(tmp_path)
    pinned = schema_bundle()
    pinned["methods"]["run.cancel"] = pinned["methods"]["run.get"]  # since removed
    _pin(copy_, pinned)
    problems = bindings.check(copy_)
    assert any("breaking" in p and "`run.cancel`" in p and "bump PROTOCOL_VERSION" in p
               for p in problems), problems
    refused = bindings.write(copy_)
    assert refused is not None and "--amend" in refused and "run.cancel" in refused
    assert json.loads(bindings.pinned_path(copy_).read_text()) == pinned  # not re-pinned
    assert bindings.write(copy_, amend=True) is None
    assert bindings.check(copy_) == []


def test_a_tightening_passes_only_if_listed_and_named_in_the_changelog(tmp_path: Path) -> None:
    copy_ = _copy(tmp_path)
    pinned = schema_bundle()
    params = pinned["$defs"]["SessionListParams"]["properties"]["limit"]
    del params["maximum"]  # as if session.list's limit had no maximum when 19 was pinned
    _pin(copy_, pinned)
    problems = bindings.check(copy_)
    assert len(problems) == 1 and "breaking" in problems[0], problems
    tightened = ("SessionListParams.limit", f"changed maximum: None -> {PAGE_LIMIT}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bindings, "TIGHTENED", {tightened: "a rule 19 documented"})
        problems = bindings.check(copy_)
        assert len(problems) == 1 and "not in the protocol changelog" in problems[0], problems
        changelog = copy_.parent / bindings.CHANGELOG
        changelog.write_text(changelog.read_text() + "- `SessionListParams.limit`\n")
        assert bindings.check(copy_) == []


def test_every_tightening_is_still_a_difference_from_the_pinned_version() -> None:
    found = {(d.subject, d.what) for d in bindings.classified(COMMITTED) or ()}
    assert set(bindings.TIGHTENED) <= found, set(bindings.TIGHTENED) - found


def test_a_stale_file_fails_naming_the_command_that_rewrites_it(tmp_path: Path) -> None:
    copy_ = _copy(tmp_path)
    (copy_ / TYPESCRIPT_FILE).write_text("// edited by hand\n")
    problems = bindings.check(copy_)
    assert any("just write-bindings" in p for p in problems)
    assert any(TYPESCRIPT_FILE in p for p in problems)
    assert bindings.write(copy_) is None  # same wire types: rewriting is allowed
    assert bindings.check(copy_) == []


def test_a_missing_schema_file_or_snapshot_is_reported(tmp_path: Path) -> None:
    copy_ = _copy(tmp_path)
    (copy_ / SCHEMA_FILE).unlink()
    assert any("missing" in p for p in bindings.check(copy_))
    bindings.pinned_path(copy_).unlink()
    assert any("no pinned snapshot" in p for p in bindings.check(copy_))
    assert bindings.write(copy_) is None  # pins the unpinned version
    assert bindings.check(copy_) == []
