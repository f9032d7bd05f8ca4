"""What params must be beyond their types: the bounded text types, and the rule that exactly
one field of a group is given. Decoding checks each, and the bindings state each in the
schema (msgspec's ``Meta`` reaches it directly; a group becomes a ``oneOf``), so a client
validating against the schema is refused exactly what the daemon refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final

import msgspec

__all__ = ["PATTERNS", "Hex32", "IdempotencyKey", "MailText", "check_exactly_one_of"]

# Mail text: the engine refuses mail that is empty or only whitespace. ``\S`` is searched for,
# not matched whole, by msgspec and by JSON Schema alike, and Python's ``\s`` is exactly
# ``str.isspace``, which ``str.strip`` (the engine's test) uses.
MAIL_PATTERN: Final = r"\S"
MailText = Annotated[str, msgspec.Meta(pattern=MAIL_PATTERN)]

# An idempotency key: 1 to 256 bytes of UTF-8 (``ids.MAX_REFERENCE``). A schema counts
# characters, so 256 characters is the bound it can state; the daemon also refuses more than
# 256 bytes, and unprintable text (``producers.check_key``).
IdempotencyKey = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]

# 32 bytes as 64 lowercase hex digits: a nonce, or an HMAC-SHA256 proof.
HEX32_PATTERN: Final = "^[0-9a-f]{64}$"
Hex32 = Annotated[str, msgspec.Meta(pattern=HEX32_PATTERN)]

# What each pattern asks for, in words: a params error names this, not the regex.
PATTERNS: Final = {MAIL_PATTERN: "text that is not empty or only whitespace",
                   HEX32_PATTERN: "64 lowercase hex digits (32 bytes)"}


def check_exactly_one_of(params: object, groups: Sequence[Sequence[str]]) -> None:
    """Refuse ``params`` unless each group has exactly one field given (not null)."""
    for group in groups:
        given = [name for name in group if getattr(params, name) is not None]
        if len(given) != 1:
            # Raised in __post_init__, msgspec reports a ValueError as a ValidationError.
            raise ValueError(f"give exactly one of {' and '.join(group)}; "
                             f"got {' and '.join(given) if given else 'neither'}")
