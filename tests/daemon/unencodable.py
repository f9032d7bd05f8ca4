"""``treemail daemon`` whose answers to ``approval.list`` cannot be encoded: the encoder raises
``MemoryError`` for them, as it would for an answer too large for memory. Everything else is
the real daemon; the test that starts it checks that the request is still answered."""

from __future__ import annotations

from typing import Any

from treemail.adapters.daemon import server
from treemail.adapters.ui.cli import main
from treemail.protocol import types as t
from treemail.protocol.jsonrpc import encode_result as _encode


def encode_result(id: Any, result: object) -> bytes:
    if isinstance(result, t.ApprovalListResult):
        raise MemoryError("planted: this answer cannot be encoded")
    return _encode(id, result)


# The server module's own global: its handlers look the name up there at call time.
server.__dict__["encode_result"] = encode_result
raise SystemExit(main())
