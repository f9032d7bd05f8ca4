"""Bugs planted in the engine on purpose, so ``treemail check --plant NAME`` shows the checker
failing, with the shortest trace that exposes each one.

Each plant swaps one core function for a wrong version while its context lasts, and puts the
original back afterwards. The wrong versions are small and plausible: an off-by-one guard, a
forgotten release, a lifecycle check skipped, a guard dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from treemail.core import engine, runs, sending
from treemail.core.config import MessagingConfig
from treemail.core.records import Message

__all__ = ["PLANTS", "planted"]


def _pair_window(original: Callable[..., Any]) -> Callable[..., Any]:
    """The pair window counts one message too few: a full window lets one more through."""

    def check_inflight(pair_pending: int, config: MessagingConfig) -> None:
        original(pair_pending - 1, config)

    return check_inflight


def _recover_keeps_claims(original: Callable[..., Any]) -> Callable[..., Any]:
    """Recovery interrupts a dead run but forgets its open request: the mail that request
    claimed stays claimed for ever instead of being released."""

    def _end(tx: Any, session: Any, run: Any, event: str, reason: str) -> None:
        if reason == "crash found at restart":
            run = attrs.evolve(run, open_request=None)
        original(tx, session, run, event, reason)

    return _end


def _discard_claimed(original: Callable[..., Any]) -> Callable[..., Any]:
    """discard reads a claimed message as released, so mail already in a model request can be
    dropped (the lifecycle forbids discard from claimed)."""

    def step_message(tx: Any, message: Message, event: str, **changes: Any) -> Message:
        if event == "discard" and message.state == "claimed":
            message = attrs.evolve(message, state="released")
        result: Message = original(tx, message, event, **changes)
        return result

    return step_message


def _no_hop_limit(original: Callable[..., Any]) -> Callable[..., Any]:
    """The hop guard is never consulted: relayed mail goes on past max_hops."""

    def check_hops(hop: int, config: MessagingConfig) -> None:
        del hop, config

    return check_hops


# name -> (module, attribute, wrong version of it)
PLANTS: dict[str, tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "pair-window": (sending, "check_inflight", _pair_window),
    "recover-keeps-claims": (runs, "_end", _recover_keeps_claims),
    "discard-claimed": (engine, "step_message", _discard_claimed),
    "no-hop-limit": (sending, "check_hops", _no_hop_limit),
}


@contextmanager
def planted(name: str | None) -> Iterator[None]:
    """Run the block with the named bug in the engine (none when ``name`` is None)."""
    if name is None:
        yield
        return
    module, attribute, wrong = PLANTS[name]
    original = getattr(module, attribute)
    setattr(module, attribute, wrong(original))
    try:
        yield
    finally:
        setattr(module, attribute, original)
