"""Line (i): the store's codec (msgspec) against the json + cattrs codec it replaced, on the
records a send writes.

The replaced codec is restated here, as the baseline only: it shows what the adoption saved
on our own records, in the same run. Each side must round-trip every record to an equal one,
or the line is not printed.
"""

from __future__ import annotations

import json
import timeit
from typing import Any

from treemail.adapters.store import codec
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
    def cycle() -> None:
        assert codec.decode(kind, codec.encode(record, b"k"), db="bench", key=b"k") == record

    cycle()
    return _best(cycle)


def _replaced(kind: type[Any], record: object) -> float:
    import cattrs  # the bench extra

    converter = cattrs.Converter()
    converter.register_structure_hook_func(lambda t: t is object, lambda value, _: value)
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    def cycle() -> None:
        raw = dumps(converter.unstructure(record)).encode()
        assert converter.structure(json.loads(raw), kind) == record

    cycle()
    return _best(cycle)


def codec_line() -> list[Line]:
    try:
        import cattrs  # noqa: F401
    except ImportError:
        return []
    records = _records()
    ours = sum(_ours(kind, record) for kind, record in records)
    theirs = sum(_replaced(kind, record) for kind, record in records)
    return [Line("i_codec", "(i) codec round trip: Message+Event+Session+Run", ours * 1e6,
                 theirs * 1e6, "µs", "json+cattrs, the codec replaced", "-", None)]
