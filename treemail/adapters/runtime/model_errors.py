"""A failed model call: no one's fault in treemail, retried or reported by the runtime's
failure policy. The classes register into the one registry of ``treemail.core.errors``.
"""

from __future__ import annotations

from treemail.core import errors

__all__ = [
    "ModelError",
    "ScriptExhausted",
]

errors.declare(__name__)


# -- model calls -----------------------------------------------------------------------


class ModelError(errors.TreemailError):
    """A model call failed: unreachable, timed out, refused, or answered something unreadable.

    ``details`` carry ``status`` (HTTP status or None) and ``body`` (an excerpt) when known.
    """

    code = "model:error"


class ScriptExhausted(ModelError):
    """A ``ScriptedModel`` was asked for more replies than its script holds."""

    code = "model:script_exhausted"
