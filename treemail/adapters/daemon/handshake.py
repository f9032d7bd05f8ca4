"""The TCP challenge-response, server side and sans I/O: a decoded frame in, an answer out.

Theory of operation (spec/protocol.md, section 2). Both sides hold the token; neither sends
it. The client opens with ``auth.challenge`` and its fresh nonce; the server answers with
its own fresh nonce and ``server_proof``, an HMAC of both nonces under the token. The client
checks that proof before it sends anything else, then sends ``auth.prove`` with
``client_proof``, the HMAC of the nonces in the other order under the other label. Only a
right proof admits the connection; every other frame, at any step, is refused with one
error frame and the connection is closed. So a listener that is not the daemon learns a
random nonce and nothing else, and a peer that is not a client learns an HMAC over a nonce it
chose and a nonce it cannot choose, which is no use on any other connection.

The states, and what each accepts:

    challenge --auth.challenge--> prove --auth.prove (right proof)--> proved
        any other frame, or a wrong proof: refused (the connection is closed)

``initialize`` with ``auth_token`` as the first frame is an old client: it gets its own code,
``rpc:token_in_clear``, which says what to do.
"""

from __future__ import annotations

import secrets
from enum import Enum

import attrs

from treemail.adapters.daemon.tcp import NONCE_BYTES, TOKEN_FILE, Token, refusal
from treemail.protocol import types as t
from treemail.protocol.errors import rpc_error
from treemail.protocol.framing import Oversized
from treemail.protocol.jsonrpc import Failure, Incoming, Request, encode_error, encode_result
from treemail.protocol.methods import (
    AUTH_CHALLENGE,
    AUTH_PROVE,
    INITIALIZE,
    METHODS,
    ParamsError,
    decode_params,
)
from treemail.protocol.rpc_errors import ClearToken, Unauthorized

__all__ = ["Handshake", "Stage", "Step"]


class Stage(Enum):
    CHALLENGE = "challenge"  # waiting for auth.challenge
    PROVE = "prove"  # the server proved itself; waiting for auth.prove
    PROVED = "proved"  # the client proved itself: the connection is served
    REFUSED = "refused"


@attrs.frozen
class Step:
    """What to do with a frame: send ``answer``; ``stage`` says what follows (REFUSED: close
    the connection after it)."""

    answer: bytes
    stage: Stage


class Handshake:
    def __init__(self, token: Token) -> None:
        self.token = token
        self.stage = Stage.CHALLENGE
        self.server_nonce = secrets.token_bytes(NONCE_BYTES)  # fresh per connection
        self._client_nonce = b""
        self.received = 0  # bytes read from the peer so far (the server bounds them)

    def receive(self, message: Incoming | Oversized) -> Step:
        """The next frame of a connection not yet admitted."""
        request = message if isinstance(message, Request) else None
        if request is None or request.method not in _EXPECTED[self.stage]:
            return self._refuse(message, self._unexpected(request))
        try:
            params = decode_params(METHODS[request.method], request.params)
        except ParamsError as exc:
            return self._refuse(message, refusal(f"{request.method}: {exc}"))
        if isinstance(params, t.AuthChallengeParams):
            return self._challenge(request, params)
        assert isinstance(params, t.AuthProveParams)
        return self._prove(request, params)

    def refuse(self, why: str) -> bytes:
        """The last frame of a connection refused for a reason outside any frame (its time
        or its bytes ran out)."""
        self.stage = Stage.REFUSED
        return encode_error(None, rpc_error(refusal(why)))

    def _challenge(self, request: Request, params: t.AuthChallengeParams) -> Step:
        self._client_nonce = bytes.fromhex(params.client_nonce)
        proof = self.token.server_proof(self._client_nonce, self.server_nonce)
        self.stage = Stage.PROVE
        return Step(encode_result(request.id, t.AuthChallengeResult(
            server_nonce=self.server_nonce.hex(), server_proof=proof.hex())), self.stage)

    def _prove(self, request: Request, params: t.AuthProveParams) -> Step:
        expected = self.token.client_proof(self.server_nonce, self._client_nonce)
        if not Token.matches(expected, params.client_proof):
            return self._refuse(request, refusal(
                "wrong client_proof: the client does not hold this daemon's token"))
        self.stage = Stage.PROVED
        return Step(encode_result(request.id, t.AuthProveResult(authenticated=True)),
                    self.stage)

    def _unexpected(self, request: Request | None) -> Unauthorized:
        if request is not None and request.method == INITIALIZE.name and isinstance(
                request.params, dict) and "auth_token" in request.params:
            return ClearToken(
                "initialize carried auth_token: this daemon no longer takes the token in "
                "clear, whoever might be listening; upgrade the client, which proves it holds "
                "the token with auth.challenge then auth.prove (spec/protocol.md, section 2). "
                "If the daemon may have been down while the token was sent, another local "
                f"user may have it: delete DATA_DIR/{TOKEN_FILE} and restart the daemon to "
                "make a new one; the connection is closed")
        expected = " or ".join(sorted(_EXPECTED[self.stage]))
        got = f"{request.method}" if request is not None else "a frame that is not a request"
        return refusal(f"expected {expected}, got {got}")

    def _refuse(self, message: Incoming | Oversized, error: Unauthorized) -> Step:
        self.stage = Stage.REFUSED
        id = message.id if isinstance(message, Request | Failure) else None
        return Step(encode_error(id, rpc_error(error)), self.stage)


_EXPECTED: dict[Stage, frozenset[str]] = {
    Stage.CHALLENGE: frozenset({AUTH_CHALLENGE.name}),
    Stage.PROVE: frozenset({AUTH_PROVE.name}),
    Stage.PROVED: frozenset(),
    Stage.REFUSED: frozenset(),
}

