"""The JSON schema of every method's params refuses what the daemon's decoding refuses, and
accepts what it accepts: bounds, lengths and exactly-one-of rules live in the wire types, and
the bindings state them. Examples the daemon answers with ``rpc:invalid_params`` are refused
by the schema too (a real daemon answers the headline ones, in ``tests/daemon``); params
generated from the schema get the same verdict from both."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.fuzz.schema_values import params_for
from treemail.protocol.bindings import schema_bundle
from treemail.protocol.methods import (
    APPROVAL_ANSWER,
    AUTH_CHALLENGE,
    AUTH_PROVE,
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    MESSAGE_LIST,
    METHODS,
    PLUGIN_PRODUCER_SEND,
    RUN_LIST,
    RUN_STEER,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_DELEGATE,
    SESSION_LIST,
    ParamsError,
    decode_params,
)

SID = "00000000-0000-4000-8000-000000000000"
HEX = "ab" * 32

# Per method: params its decoding refuses, beyond a missing field, an unknown field and a
# wrong type (which every method is tried with below).
REFUSED: dict[str, list[dict[str, Any]]] = {
    AUTH_CHALLENGE.name: [{"client_nonce": "AB" * 32}, {"client_nonce": "ab"}],
    AUTH_PROVE.name: [{"client_proof": HEX + "0"}],
    SESSION_CREATE.name: [{}, {"agent": "a", "agent_doc": "d"}, {"agent": None},
                       {"agent": None, "agent_doc": None, "agent_docs": []}],
    SESSION_LIST.name: [{"after": -1}, {"limit": 0}, {"limit": 257}],
    RUN_LIST.name: [{"session_id": SID, "after": -1}, {"session_id": SID, "limit": 0}],
    MESSAGE_LIST.name: [{"session_id": SID, "limit": 257}],
    RUN_SUBMIT.name: [{"session_id": SID, "text": ""}, {"session_id": SID, "text": " \n\t"},
                   {"session_id": SID, "text": "hi", "idempotency_key": ""},
                   {"session_id": SID, "text": "hi", "idempotency_key": "k" * 257}],
    RUN_STEER.name: [{"session_id": SID, "text": "\u2003"}],
    SESSION_DELEGATE.name: [{"parent_session_id": SID, "agent": "a", "task": " "}],
    PLUGIN_PRODUCER_SEND.name: [{"session_id": SID, "body": "  "},
                             {"session_id": SID, "body": "b", "idempotency_key": ""}],
    EVENTS_READ.name: [{"after": -1}],
    EVENTS_SUBSCRIBE.name: [{"after": -1}],
    APPROVAL_ANSWER.name: [{"approval_id": "a", "approve": True, "scope": "forever"}],
}

# Per method: params it accepts, at the edges of its bounds.
ACCEPTED: dict[str, list[dict[str, Any]]] = {
    AUTH_CHALLENGE.name: [{"client_nonce": HEX}],
    AUTH_PROVE.name: [{"client_proof": HEX}],
    SESSION_CREATE.name: [{"agent": "a"}, {"agent_doc": "d", "agent": None, "agent_docs": ["x"]}],
    SESSION_LIST.name: [{}, {"after": 0, "limit": 1}, {"limit": 256}],
    RUN_SUBMIT.name: [{"session_id": SID, "text": " x ", "idempotency_key": "k" * 256}],
    PLUGIN_PRODUCER_SEND.name: [{"session_id": SID, "body": "b", "idempotency_key": "k"}],
    EVENTS_READ.name: [{"after": 0}, {"after": 5, "limit": 3}],
    EVENTS_SUBSCRIBE.name: [{}, {"after": 0, "session_id": SID}],
}


@cache
def _validator(method: str) -> jsonschema.Draft202012Validator:
    bundle = schema_bundle()
    root = {"$defs": bundle["$defs"], "events": bundle["events"],
            **bundle["methods"][method]["params"]}
    return jsonschema.Draft202012Validator(root)


def _decodes(method: str, params: Any) -> str | None:
    """None when the daemon's decoding takes ``params``; else why not."""
    try:
        decode_params(METHODS[method], params)
    except ParamsError as exc:
        return str(exc)
    return None


def _generic(method: str) -> list[Any]:
    """A missing required field, an unknown field, a wrong type, not an object."""
    schema = schema_bundle()["$defs"][METHODS[method].params.__name__]
    valid = (ACCEPTED.get(method) or [{}])[0]
    wrong: list[Any] = [{**valid, "no_such_field": 1}, [valid], "params"]
    wrong += [{k: v for k, v in valid.items() if k != field}
              for field in schema.get("required", ()) if field in valid]
    wrong += [{**valid, field: {"nested": True}} for field in schema.get("properties", {})]
    return wrong


@pytest.mark.parametrize("method", sorted(METHODS))
def test_params_the_daemon_refuses_the_schema_refuses(method: str) -> None:
    for params in [*REFUSED.get(method, []), *_generic(method)]:
        assert _decodes(method, params) is not None, (method, params)
        assert not _validator(method).is_valid(params), (method, params)


@pytest.mark.parametrize("method", sorted(ACCEPTED))
def test_params_at_the_edges_are_accepted_by_both(method: str) -> None:
    for params in ACCEPTED[method]:
        assert _decodes(method, params) is None, (method, params, _decodes(method, params))
        assert _validator(method).is_valid(params), (method, params)


def test_the_examples_cover_every_method_with_bounds() -> None:
    """A method whose params carry a bound or a rule has refused examples above."""
    defs = schema_bundle()["$defs"]
    bounded = {method for method, m in METHODS.items()
               if any(key in str(defs[m.params.__name__]) for key in
                      ("minimum", "maximum", "minLength", "maxLength", "pattern", "oneOf"))}
    assert bounded <= set(REFUSED), bounded - set(REFUSED)


@given(method=st.sampled_from(sorted(METHODS)), data=st.data())
def test_the_schema_and_decoding_agree_on_generated_params(method: str,
                                                           data: st.DataObject) -> None:
    try:  # as the daemon reads them: off the wire, which carries no lone surrogate or NaN
        params = msgspec.json.decode(json.dumps(data.draw(params_for(method))).encode())
    except msgspec.DecodeError:
        assume(False)
    why = _decodes(method, params)
    accepted = _validator(method).is_valid(params)
    if accepted and why is not None and "got `float`" in why:
        # JSON Schema counts 1.0 as an integer (one JSON number); msgspec does not. A client
        # writing integers never meets it.
        return
    assert accepted == (why is None), (method, params, why)
