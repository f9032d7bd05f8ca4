"""Newline-delimited frames with a size limit, sans I/O: bytes in, whole frames out.

A line longer than the limit is never buffered whole: once it passes the limit its bytes are
counted and dropped until its newline, and it comes out as one ``Oversized`` marker, so the
connection answers it with an error and goes on with the next line.
"""

from __future__ import annotations

import msgspec

__all__ = ["HEAD", "FrameSplitter", "Oversized"]


# How much of an oversized line is kept, so a reader can tell whose answer it dropped.
HEAD = 256


class Oversized(msgspec.Struct, frozen=True):
    """A line of ``size`` bytes (without its newline) was over the limit and was dropped;
    ``head`` is its first bytes (at most ``HEAD``), where a response names its id."""

    size: int
    head: bytes = b""


class FrameSplitter:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._dropped = -1  # bytes of an oversized line dropped so far; -1: not dropping
        self._head = b""  # the first bytes of the line being dropped

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        frames: list[bytes | Oversized] = []
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            self._take(chunk[start:newline])
            frames.extend(self._end_line())
            start = newline + 1
        self._take(chunk[start:])
        return frames

    def end(self) -> list[bytes | Oversized]:
        """The stream ended: a last line without a newline is still a frame."""
        return self._end_line()

    def _take(self, piece: bytes) -> None:
        if self._dropped >= 0:
            self._dropped += len(piece)
            return
        self._buffer += piece
        if len(self._buffer) > self.limit:
            self._dropped = len(self._buffer)
            self._head = bytes(self._buffer[:HEAD])
            self._buffer.clear()

    def _end_line(self) -> list[bytes | Oversized]:
        if self._dropped >= 0:
            size, self._dropped = self._dropped, -1
            return [Oversized(size, self._head)]
        line = bytes(self._buffer).rstrip(b"\r")
        self._buffer.clear()
        return [line] if line.strip() else []
