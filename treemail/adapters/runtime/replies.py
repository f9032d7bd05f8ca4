"""Model output made storable before anything durable sees it.

A model may answer anything: text with lone surrogates (which UTF-8 cannot encode), tool-call
ids with control characters, or ids too long for a store key. The actor passes every reply
through ``normalise`` before the request commits, so the reply is stored, replayed to the
model and keyed for idempotency in one safe form:

* a lone surrogate anywhere (text, tool name, argument keys and values) becomes U+FFFD;
* a tool-call id that is not short printable ASCII is replaced by a digest of it. The digest
  is deterministic, so a retried call with the same id still meets its idempotency key.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs

from treemail.adapters.runtime.llm import ModelReply, ToolCall

__all__ = ["MAX_CALL_ID", "normalise", "storable_text"]

# Ids longer than this are digested: a store key holds session, run and call id together,
# and LMDB refuses keys over 511 bytes.
MAX_CALL_ID = 64

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (a str holds no valid pairs)."""
    return _SURROGATE.sub("\ufffd", text)


def call_id(raw: str) -> str:
    """A model's tool-call id if it is short printable ASCII, else ``call_<digest>``."""
    if 0 < len(raw) <= MAX_CALL_ID and raw.isascii() and raw.isprintable() and " " not in raw:
        return raw
    digest = hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=16)
    return f"call_{digest.hexdigest()}"


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _call(call: ToolCall) -> ToolCall:
    return ToolCall(id=call_id(call.id), name=storable_text(call.name),
                    arguments=_clean(call.arguments))


def normalise(reply: ModelReply) -> ModelReply:
    """``reply`` in a form every store accepts; an already clean reply is returned as is."""
    text = None if reply.text is None else storable_text(reply.text)
    calls = tuple(_call(call) for call in reply.tool_calls)
    if text == reply.text and calls == reply.tool_calls:
        return reply
    return attrs.evolve(reply, text=text, tool_calls=calls)
