"""The calls one send makes, counted, not timed: ``bench.calls`` profiles line (g)'s
workload, and the count does not move with the machine's load, so a change that puts calls
back on the send path fails here, at the bound docs/performance.md records."""

from __future__ import annotations

from bench.calls import profile_sends

# 116 at this bound's last change (129 before a send's new numbered rows were keyed without
# stored_key's cache, its call id checked once, a decision and a UUID reference remembered,
# a flush's records encoded in one call and the acceptance handed the inbox guard's counts;
# 157 before the tool call's three rows were read in one call and a flush's puts went to
# LMDB in one, 173 before the contract's guards ran as one function and a send's rows went
# to the tables in one call, 201 before a flush's rows went to LMDB through one seam, 331
# before the send-specific store operations); a little room, so that a call moved from one
# function to another does not fail it.
BOUND = 120
SENDS = 100


def test_a_send_makes_no_more_calls_than_its_bound() -> None:
    stats = profile_sends(SENDS).stats  # type: ignore[attr-defined]
    per_send = sum(row[1] for row in stats.values()) / SENDS
    assert per_send <= BOUND, (
        f"{per_send:.0f} calls per send, over the bound of {BOUND}: see "
        "`python -m bench.calls --top 20` for where they went")
