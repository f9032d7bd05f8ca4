"""The TCP challenge-response, sans I/O: each step's answer and stage, from decoded frames."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

from treemail.adapters.daemon.handshake import Handshake, Stage
from treemail.adapters.daemon.tcp import Token
from treemail.protocol.framing import Oversized
from treemail.protocol.jsonrpc import Request
from treemail.protocol.methods import AUTH_CHALLENGE, AUTH_PROVE, INITIALIZE
from treemail.protocol.rpc_errors import ClearToken, Unauthorized

SECRET = "s" * 43


def _request(method: str, **params: Any) -> Request:
    return Request(id=1, method=method, params=params)


def _answer(frame: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(frame)
    return decoded


def test_the_proofs_are_hmac_sha256_over_a_label_and_both_nonces() -> None:
    token, a, b = Token(SECRET), secrets.token_bytes(32), secrets.token_bytes(32)
    key = SECRET.encode()
    assert token.server_proof(a, b) == hmac.new(
        key, b"treemail-server" + a + b, hashlib.sha256).digest()
    assert token.client_proof(b, a) == hmac.new(
        key, b"treemail-client" + b + a, hashlib.sha256).digest()
    assert token.server_proof(a, b) != token.client_proof(a, b)  # the labels part them


def test_an_honest_client_is_admitted_in_two_steps() -> None:
    token, nonce = Token(SECRET), secrets.token_bytes(32)
    handshake = Handshake(token)
    step = handshake.receive(_request(AUTH_CHALLENGE.name, client_nonce=nonce.hex()))
    result = _answer(step.answer)["result"]
    server_nonce = bytes.fromhex(result["server_nonce"])
    assert step.stage is Stage.PROVE and server_nonce == handshake.server_nonce
    assert result["server_proof"] == token.server_proof(nonce, server_nonce).hex()
    step = handshake.receive(_request(
        AUTH_PROVE.name, client_proof=token.client_proof(server_nonce, nonce).hex()))
    assert step.stage is Stage.PROVED
    assert _answer(step.answer)["result"] == {"authenticated": True}


def test_each_connection_gets_a_fresh_server_nonce() -> None:
    nonces = {Handshake(Token(SECRET)).server_nonce for _ in range(100)}
    assert len(nonces) == 100 and all(len(n) == 32 for n in nonces)


def test_a_proof_under_another_token_is_refused() -> None:
    nonce = secrets.token_bytes(32)
    handshake = Handshake(Token(SECRET))
    handshake.receive(_request(AUTH_CHALLENGE.name, client_nonce=nonce.hex()))
    wrong = Token("t" * 43).client_proof(handshake.server_nonce, nonce)
    step = handshake.receive(_request(AUTH_PROVE.name, client_proof=wrong.hex()))
    error = _answer(step.answer)["error"]
    assert step.stage is Stage.REFUSED and error["data"]["code"] == Unauthorized.code


def test_the_token_in_clear_is_refused_with_its_own_code() -> None:
    step = Handshake(Token(SECRET)).receive(_request(
        INITIALIZE.name, protocol_version=19, client_info={"name": "old"}, auth_token=SECRET))
    error = _answer(step.answer)["error"]
    assert step.stage is Stage.REFUSED and error["data"]["code"] == ClearToken.code
    assert error["code"] == -32004 and SECRET not in error["message"]


def test_frames_out_of_order_are_refused() -> None:
    for first in (_request(AUTH_PROVE.name, client_proof="00" * 32), Oversized(5000),
                  _request(AUTH_CHALLENGE.name, client_nonce="00" * 31)):
        step = Handshake(Token(SECRET)).receive(first)
        assert step.stage is Stage.REFUSED
        assert _answer(step.answer)["error"]["data"]["code"] == Unauthorized.code
    handshake = Handshake(Token(SECRET))
    handshake.receive(_request(AUTH_CHALLENGE.name, client_nonce="00" * 32))
    again = handshake.receive(_request(AUTH_CHALLENGE.name, client_nonce="00" * 32))
    assert again.stage is Stage.REFUSED
