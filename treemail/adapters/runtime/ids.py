"""Id sources for real use: random v4 UUIDs, or a seeded sequence for reproducible demos."""

from __future__ import annotations

import random
import uuid

__all__ = ["SeededIds", "UuidIds"]


class UuidIds:
    """Random v4 UUIDs: the production id source."""

    def new_id(self) -> str:
        return str(uuid.uuid4())


class SeededIds:
    """Random-looking v4 UUIDs from a seed, so a demo prints the same transcript each run."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def new_id(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))
