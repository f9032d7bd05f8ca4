"""What a model-checker run reached: the send guards that answered, the lifecycle
transitions the engine took (of every machine ``lifecycle`` declares, approvals too), and the
grant scopes held calls were approved for, beside the whole of each.

Transitions are read where the engine takes them: while a search runs, ``recording`` wraps
``Lifecycle.step`` (the one function every engine state change goes through) to note each
(machine, state, trigger) it allows. Guards are read from the answers: a guard is reached when
a send is refused with a code only it raises, or, for the idempotent replay, when a retried
call is answered with its original result. Scopes are read from the answers too: an approval
answered ``ok`` with approve in that scope.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from treemail.core import lifecycle
from treemail.core.errors import ExternalBusy
from treemail.core.lifecycle import Lifecycle
from treemail.core.records import GrantScope
from treemail.core.sending import GUARDS

__all__ = ["ALL_SCOPES", "ALL_TRANSITIONS", "BOUNDARY", "MACHINES", "Coverage", "boundary_step",
           "guard_of", "recording"]

Transition = tuple[str, str, str]  # (machine, from state, trigger)

# Every machine the lifecycle module declares, found rather than listed: a machine added
# there is counted here without anyone remembering to.
MACHINES: tuple[Lifecycle[Any, Any], ...] = tuple(
    table for table in vars(lifecycle).values() if isinstance(table, Lifecycle))
ALL_TRANSITIONS: frozenset[Transition] = frozenset(
    (table.name, str(state), str(trigger))
    for table in MACHINES for state, trigger in table.transitions)
ALL_SCOPES: tuple[str, ...] = tuple(scope.value for scope in GrantScope)
ALL_GUARDS: tuple[str, ...] = tuple(guard.name for guard in GUARDS)
REPLAY = "idempotent_replay"

# A code raised by one guard only names it; a code two guards share names neither.
_raisers: dict[str, list[str]] = {}
for _guard in GUARDS:
    for _error in _guard.errors:
        _raisers.setdefault(_error.code, []).append(_guard.name)
_GUARD_OF_CODE = {code: names[0] for code, names in _raisers.items() if len(names) == 1}


def guard_of(code: str) -> str | None:
    return _GUARD_OF_CODE.get(code)


# The external boundary's steps (spec/external.md), reached when the bounds attach an
# external session. They take the lifecycle's own transitions (claim, consume, release), so
# the transitions alone cannot tell that the boundary took them.
BOUNDARY: tuple[str, ...] = (
    "check_mail claims", "check_mail refused while claimed", "next call consumes",
    "connection end releases", "a call opens a turn")


def boundary_step(kind: str, args: tuple[Any, ...], answer: tuple[Any, ...]) -> str | None:
    """The boundary step an accepted (or refused) external action took, if any."""
    ok = answer[0] == "ok"
    if kind == "external_check":
        if ok:
            return BOUNDARY[0] if answer[1] is not None else None
        return BOUNDARY[1] if answer[1] == ExternalBusy.code else None
    if kind == "external_settle" and ok and answer[1] is True:
        return BOUNDARY[2] if args[-1] else BOUNDARY[3]
    if kind == "external_turn_run" and ok:
        return BOUNDARY[4]
    return None


@attrs.define
class Coverage:
    guards: set[str] = attrs.Factory(set)
    transitions: set[Transition] = attrs.Factory(set)
    boundary: set[str] = attrs.Factory(set)  # empty: the search attached no external session
    scopes: set[str] = attrs.Factory(set)  # grant scopes of approvals answered approve, ok

    def merge(self, other: Coverage) -> None:
        """What ``other`` reached, added to this (a worker's share of the search)."""
        self.guards |= other.guards
        self.transitions |= other.transitions
        self.boundary |= other.boundary
        self.scopes |= other.scopes

    def missing_guards(self) -> list[str]:
        return [name for name in ALL_GUARDS if name not in self.guards]

    def missing_scopes(self) -> list[str]:
        return [scope for scope in ALL_SCOPES if scope not in self.scopes]

    def missing_transitions(self) -> list[Transition]:
        return sorted(ALL_TRANSITIONS - self.transitions)

    def missing_boundary(self) -> list[str]:
        return [step for step in BOUNDARY if step not in self.boundary]

    @property
    def complete(self) -> bool:
        return not (self.missing_guards() or self.missing_transitions()
                    or self.missing_scopes() or (self.boundary and self.missing_boundary()))

    def line(self) -> str:
        guards = f"guards {len(self.guards & set(ALL_GUARDS))}/{len(ALL_GUARDS)}"
        taken = f"transitions {len(self.transitions & ALL_TRANSITIONS)}/{len(ALL_TRANSITIONS)}"
        scopes = f"approval scopes {len(self.scopes & set(ALL_SCOPES))}/{len(ALL_SCOPES)}"
        gaps = [*self.missing_guards(),
                *(f"{machine}.{state}--{trigger}" for machine, state, trigger
                  in self.missing_transitions()),
                *(f"approve {scope}" for scope in self.missing_scopes())]
        boundary = ""
        if self.boundary:
            boundary = f", external boundary {len(self.boundary)}/{len(BOUNDARY)}"
            gaps += [f"external: {step}" for step in self.missing_boundary()]
        return f"{guards} reached, {taken} taken, {scopes} granted{boundary}" + (
            f"; not reached: {', '.join(gaps)}" if gaps else "")


_STEP = Lifecycle.step


@contextmanager
def recording(into: Coverage) -> Iterator[None]:
    """Note every lifecycle step the engine takes while the block runs. The steps are noted
    as they come (the machine and the enum members: the checker takes millions of steps, and
    a member's ``str`` costs more than the note) and named once, when the block ends."""
    original = Lifecycle.step
    plain = original is _STEP  # not wrapped already, by another recording
    taken: set[tuple[str, Any, Any]] = set()
    note = taken.add

    def step(self: Lifecycle[Any, Any], subject: str, state: Any, trigger: Any) -> Any:
        # While ``original`` is the class's own (no other recording wraps it), its table is
        # read here, so a legal step costs one call, not two; an illegal one goes through
        # ``original``, which raises, and is not noted.
        target = self.transitions.get((state, trigger)) if plain else None
        if target is None:
            target = original(self, subject, state, trigger)
        note((self.name, state, trigger))
        return target

    Lifecycle.step = step  # type: ignore[method-assign]
    try:
        yield
    finally:
        Lifecycle.step = original  # type: ignore[method-assign]
        into.transitions |= {(name, str(state), str(trigger)) for name, state, trigger in taken}
