"""How agent mail appears in the recipient's prompt.

The body is kept exactly as written; only the envelope and, when the recipient can answer,
the reply hint are added. Ids, hop counts and other delivery metadata stay in the event
record and never reach the model.
"""

from __future__ import annotations

__all__ = ["render_envelope"]


def render_envelope(sender_reference: str, body: str, *, reply_hint: bool) -> str:
    """Render agent mail from ``sender_reference`` (a handle, or the UUID of a legacy session)."""
    opening = f'<agent_message from="{sender_reference}">'
    if reply_hint:
        hint = f'[use `send_message(to="{sender_reference}", ...)` to reply]'
        return f"{opening}\n{body}\n\n{hint}\n</agent_message>"
    return f"{opening}\n{body}\n</agent_message>"
