"""The differential suite catches bugs planted in the engine: a checker that cannot fail is
worth nothing, so this is the proof that ours can.

Each plant swaps one engine function for a plausible wrong version (an off-by-one guard, a
forgotten release, a check skipped) and runs the differential state machine with the ci
profile's example budget; the suite must find a failing example. Shrinking is skipped: the
point is that a failure is found, not its smallest form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.property.test_differential import DifferentialMachine
from treemail.core import addressing, delivery, engine, runs, sending
from treemail.core.config import MessagingConfig
from treemail.core.records import Message, Owner, Session
from treemail.core.store import ReadTxn

Wrap = Callable[[Any], Any]


def pair_window_off_by_one(original: Any) -> Any:
    def check_inflight(pair_pending: int, config: MessagingConfig) -> None:
        original(pair_pending - 1, config)

    return check_inflight


def idempotency_ignored(original: Any) -> Any:
    """Every retry looks new: a retried tool call delivers twice."""

    class ForgetfulKey:
        @staticmethod
        def of(ctx: Any) -> Any:
            return original(ctx.session_id, ctx.run_id, f"{ctx.tool_call_id}/{id(object())}")

    return ForgetfulKey


def claims_kept_at_restart(original: Any) -> Any:
    def _end(tx: Any, session: Any, run: Any, event: str, reason: str) -> None:
        if reason == "crash found at restart":
            run = attrs.evolve(run, open_request=None)
        original(tx, session, run, event, reason)

    return _end


def inbox_counts_plugin_mail(original: Any) -> Any:
    def _counted(message: Message) -> bool:
        return bool(original(message)) or message.owner is Owner.PLUGIN

    return _counted


def handle_across_trees(original: Any) -> Any:
    def resolve(tx: ReadTxn, sender: Session, reference: str) -> Session:
        try:
            found: Session = original(tx, sender, reference)
            return found
        except addressing.UnknownSubagentReference:
            for session in tx.sessions():
                if session.handle == reference:
                    return session
            raise

    return resolve


def hop_guard_wrong_base(original: Any) -> Any:
    """The guard judges the sending run's base hop instead of the hop the message carries."""

    def check_hops(hop: int, config: MessagingConfig) -> None:
        original(hop - 1, config)

    return check_hops


def discard_from_claimed(original: Any) -> Any:
    def step_message(tx: Any, message: Message, event: str, **changes: Any) -> Message:
        if event == "discard" and message.state == "claimed":
            message = attrs.evolve(message, state="released")
        stepped: Message = original(tx, message, event, **changes)
        return stepped

    return step_message


def reply_hint_always(original: Any) -> Any:
    def render_envelope(sender_reference: str, body: str, *, reply_hint: bool) -> str:
        del reply_hint
        rendered: str = original(sender_reference, body, reply_hint=True)
        return rendered

    return render_envelope


def steer_never_joins(original: Any) -> Any:
    def admit_accepted(tx: Any, session: Any, current: Any) -> int:
        del current
        admitted: int = original(tx, session, None)
        return admitted

    return admit_accepted


PLANTS: dict[str, tuple[Any, str, Wrap]] = {
    "pair window off by one": (sending, "check_inflight", pair_window_off_by_one),
    "idempotency ignored": (sending, "IdempotencyKey", idempotency_ignored),
    "claimed mail kept at restart": (runs, "_end", claims_kept_at_restart),
    "inbox counts plugin mail": (delivery, "_counted", inbox_counts_plugin_mail),
    "handle resolves across trees": (sending, "resolve", handle_across_trees),
    "hop guard uses the wrong base": (sending, "check_hops", hop_guard_wrong_base),
    "discard from claimed allowed": (engine, "step_message", discard_from_claimed),
    "reply hint without permission": (runs, "render_envelope", reply_hint_always),
    "steer never joins the running run": (runs, "admit_accepted", steer_never_joins),
}


@pytest.fixture
def plant(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module, attribute, wrong = PLANTS[request.param]
    monkeypatch.setattr(module, attribute, wrong(getattr(module, attribute)))
    yield request.param


def _hunt() -> None:
    current = settings()  # the loaded profile (ci unless HYPOTHESIS_PROFILE says otherwise)
    run_state_machine_as_test(
        DifferentialMachine,
        settings=settings(
            current,
            database=None,
            # Derandomized, so each plant meets the same examples on every run: the suite
            # either catches it or it does not, and CI cannot pass or fail by luck.
            derandomize=True,
            phases=[Phase.generate],
            suppress_health_check=[*current.suppress_health_check, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize("plant", sorted(PLANTS), indirect=True)
def test_the_suite_finds_the_planted_bug(plant: str) -> None:
    with pytest.raises(AssertionError):
        _hunt()


def test_without_a_plant_the_same_hunt_passes() -> None:
    _hunt()
