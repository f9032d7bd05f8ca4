"""Line (h): the store's codec (json + cattrs) against msgspec on the records a send writes.

msgspec encodes and decodes attrs classes natively; this line measures what adopting it for
``treemail/adapters/codec.py`` would save, on our own records, before anyone adopts it.
Each side must round-trip every record to an equal one, or the line is not printed.
"""

from __future__ import annotations

import timeit
from typing import Any

from treemail.adapters import codec
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Event, Message, Mode, Owner, Run, Session

from bench.lines import Line  # isort: skip

_SID, _MID = "00000001-0000-4000-8000-000000000000", "00000002-0000-4000-8000-000000000000"


def _records() -> list[tuple[type[Any], object]]:
    message = Message(_MID, _SID, "00000003-0000-4000-8000-000000000000", Owner.AGENT,
                      "x" * 200, Mode.QUEUE, 1, 5)
    event = Event(_SID, 7, "ProducerMessageAccepted",
                  {"message_id": _MID, "owner": "agent", "sender": message.sender,
                   "run_id": None, "request_id": None, "mode": "queue", "agent_hop": 1,
                   "body": message.body})
    session = Session(_SID, _SID, None, AgentSpec("bench", rules=Rules.of({"*": "allow"})),
                      "bench-1", 1)
    run = Run("00000004-0000-4000-8000-000000000000", _SID, 1)
    return [(Message, message), (Event, event), (Session, session), (Run, run)]


def _best(action: Any, number: int = 2000) -> float:
    return min(timeit.repeat(action, number=number, repeat=5)) / number


def _ours(kind: type[Any], record: object) -> float:
    raw = codec.encode(record, b"k")

    def cycle() -> None:
        codec._shared.clear()  # a cold decode, as for a record not read before
        assert codec.decode(kind, codec.encode(record, b"k"), db="bench", key=b"k") == record

    assert codec.decode(kind, raw, db="bench", key=b"k") == record
    return _best(cycle)


def _msgspec(kind: type[Any], record: object) -> float:
    import msgspec  # the bench extra

    encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder(kind)
    assert decoder.decode(encoder.encode(record)) == record
    return _best(lambda: decoder.decode(encoder.encode(record)))


def codec_line() -> list[Line]:
    try:
        import msgspec  # noqa: F401
    except ImportError:
        return []
    records = _records()
    ours = sum(_ours(kind, record) for kind, record in records)
    theirs = sum(_msgspec(kind, record) for kind, record in records)
    return [Line("h_codec", "(h) codec round trip: Message+Event+Session+Run", ours * 1e6,
                 theirs * 1e6, "µs", "msgspec on the same attrs records", "-", None)]
