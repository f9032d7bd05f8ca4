"""Bugs planted in the engine on purpose, so ``treemail check --plant NAME`` shows the checker
failing, with the shortest trace that exposes each one.

Each plant swaps one core function for a wrong version while its context lasts, and puts the
original back afterwards. The wrong versions are small and plausible: an off-by-one guard, a
forgotten release, a lifecycle check skipped, a guard dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from treemail.core import (
    approvals,
    engine,
    events,
    external,
    producers,
    receipts,
    runs,
    sending,
    transitions,
)
from treemail.core.config import MessagingConfig
from treemail.core.errors import InvalidToolContext, UnknownSubagentReference
from treemail.core.keys import inbox_counter
from treemail.core.lifecycle import MessageState, MessageTrigger, RunState, RunTrigger
from treemail.core.records import GrantScope, Message, Owner, Session
from treemail.core.runs import need_session
from treemail.core.store import ReadTxn, WriteTxn

__all__ = ["PLANTS", "planted"]


def _pair_window(original: Callable[..., Any]) -> Callable[..., Any]:
    """The pair window counts one message too few: a full window lets one more through."""

    def check_inflight(pair_pending: int, config: MessagingConfig) -> None:
        original(pair_pending - 1, config)

    return check_inflight


def _recover_keeps_claims(original: Callable[..., Any]) -> Callable[..., Any]:
    """Recovery interrupts a dead run but forgets its open request: the mail that request
    claimed stays claimed for ever instead of being released."""

    def _end(tx: Any, session: Any, run: Any, trigger: RunTrigger, reason: str,
             **rest: Any) -> None:
        if reason == "crash found at restart":
            run = attrs.evolve(run, open_request=None)
        original(tx, session, run, trigger, reason, **rest)

    return _end


def _discard_claimed(original: Callable[..., Any]) -> Callable[..., Any]:
    """discard reads a claimed message as released, so mail already in a model request can be
    dropped (the lifecycle forbids discard from claimed)."""

    def step_message(
        tx: Any, message: Message, trigger: MessageTrigger, **changes: Any
    ) -> Message:
        if trigger is MessageTrigger.DISCARD and message.state == MessageState.CLAIMED:
            message = attrs.evolve(message, state=MessageState.RELEASED)
        result: Message = original(tx, message, trigger, **changes)
        return result

    return step_message


def _no_hop_limit(original: Callable[..., Any]) -> Callable[..., Any]:
    """The hop guard is never consulted: relayed mail goes on past max_hops."""

    def check_hops(hop: int, config: MessagingConfig) -> None:
        del hop, config

    return check_hops


def _idempotency_ignored(original: Any) -> Any:
    """Every retry looks new: a retried tool call delivers twice. A counter, not an object
    address (which CPython reuses), so that every call gets a key no earlier call had."""
    calls = itertools.count()

    class ForgetfulKey:
        @staticmethod
        def of(ctx: Any) -> Any:
            return original(ctx.session_id, ctx.run_id, f"{ctx.tool_call_id}/{next(calls)}")

    return ForgetfulKey


def _digest_ignored(original: Callable[..., Any]) -> Callable[..., Any]:
    """The arguments digest is never told apart: a reused tool call id with other arguments
    replays the first call's result and sends nothing."""

    def arguments_digest(args: Any) -> str:
        del args
        return "same"

    return arguments_digest


def _producer_key_forgotten(original: Any) -> Any:
    """A producer's key is never found again: a keyed retry of run.submit delivers twice."""
    calls = itertools.count()

    def forgetful(session_id: str, owner: Any, key: str) -> Any:
        return original(session_id, owner, f"{key}/{next(calls)}")

    return forgetful


def _producer_digest_ignored(original: Callable[..., Any]) -> Callable[..., Any]:
    """A producer's mail is never told apart: a key reused for other mail replays the first
    accept, and the other mail is lost without a word."""

    def mail_digest(body: str, mode: Any, sender: str | None) -> str:
        del body, mode, sender
        return "same"

    return mail_digest


def _inbox_counts_plugin_mail(original: Callable[..., Any]) -> Callable[..., Any]:
    """Plugin mail is counted against the agent inbox cap (every plugin message, with a
    sender or without one)."""

    def _track(tx: WriteTxn, message: Message, delta: int) -> None:
        original(tx, message, delta)
        if message.owner is Owner.PLUGIN:
            tx.add(inbox_counter(message.recipient), delta)

    return _track


def _handle_across_trees(original: Callable[..., Any]) -> Callable[..., Any]:
    """A handle missing from the sender's tree is looked up in every tree."""

    def resolve(tx: ReadTxn, sender: Session, reference: str) -> Session:
        try:
            found: Session = original(tx, sender, reference)
            return found
        except UnknownSubagentReference:
            for session in tx.sessions():
                if session.handle == reference:
                    return session
            raise

    return resolve


def _hop_wrong_base(original: Callable[..., Any]) -> Callable[..., Any]:
    """The hop guard judges the sending run's base hop, not the hop the message carries."""

    def check_hops(hop: int, config: MessagingConfig) -> None:
        original(hop - 1, config)

    return check_hops


def _reply_hint_always(original: Callable[..., Any]) -> Callable[..., Any]:
    """The reply hint is shown even to a recipient that cannot see send_message."""

    def render_mail(owner: Any, body: str, *, sender_reference: str | None,
                    from_child: bool, reply_hint: bool) -> str:
        del reply_hint
        rendered: str = original(owner, body, sender_reference=sender_reference,
                                 from_child=from_child, reply_hint=True)
        return rendered

    return render_mail


def _outside_text_raw(original: Callable[..., Any]) -> Callable[..., Any]:
    """Mail no agent sent (user, plugin, goal, a task) reaches the model as written, so a
    forged envelope in it reads as real; only agent mail and results are rendered."""

    def render_mail(owner: Any, body: str, *, sender_reference: str | None,
                    from_child: bool, reply_hint: bool) -> str:
        rendered: str = original(owner, body, sender_reference=sender_reference,
                                 from_child=from_child, reply_hint=reply_hint)
        enveloped = owner is Owner.AGENT or (owner is Owner.DELEGATION and from_child)
        return rendered if enveloped and sender_reference is not None else body

    return render_mail


def _steer_never_joins(original: Callable[..., Any]) -> Callable[..., Any]:
    """Steered mail never joins the running run: it always waits for the next one."""

    def admit_accepted(tx: Any, session: Any, current: Any) -> list[Message]:
        del current
        pending: list[Message] = original(tx, session, None)
        return pending

    return admit_accepted


def _mode_retry_replays(original: Callable[..., Any]) -> Callable[..., Any]:
    """A call's digest leaves out its mode: the same call id retried with only the mode
    changed replays the first call instead of being refused as other arguments."""

    def arguments_digest(args: Any) -> str:
        return sending.text_digest(args.to, args.body)

    return arguments_digest


def _rule_before_liveness(original: Any) -> Any:
    """The sender's rule is read before its run is checked live: a late call of an ended run
    is answered by the rule (asked and held, or denied) instead of invalid_tool_context; only
    under an allow rule is it refused as it should be."""

    def permission(a: Any) -> None:
        sender, run = a.sender, a.run
        sending._check_permission(a.tx, sending.current_rules(a.agents, sender), sender,
                                  a.recipient, a.ctx)
        if run.status is not RunState.RUNNING and not a.approved:
            raise InvalidToolContext(f"run {run.run_id} is not running")

    return tuple(attrs.evolve(g, check=permission) if g.name == "permission" else g
                 for g in original)


def _session_grant_for_tree(original: Callable[..., Any]) -> Callable[..., Any]:
    """Approving a call for the session grants it to the whole tree: the sender's siblings
    send unasked too."""

    def _grant(tx: Any, approval: Any, scope: GrantScope) -> None:
        original(tx, approval, GrantScope.TREE if scope is GrantScope.SESSION else scope)

    return _grant


def _revert_spares_descendants(original: Callable[..., Any]) -> Callable[..., Any]:
    """Revert makes a ghost of the session named, not of its descendants: a reverted
    branch's children stay reachable by handle."""

    def revert(self: Any, session_id: str) -> list[str]:
        def work(tx: Any) -> list[str]:
            target = need_session(tx, session_id)
            if not target.live:
                return []
            tx.put_session(attrs.evolve(target, live=False))
            events.record(tx, target.session_id, events.SessionReverted(session_id))
            return [target.session_id]

        done: list[str] = self._transact(work)
        return done

    return revert


def _cousin_as_sibling(original: Callable[..., Any]) -> Callable[..., Any]:
    """Any two delegated sessions are labelled siblings, cousins too (two children of two
    siblings), so a cousin gets the sibling rule instead of the wildcard's."""

    def relationship(sender_id: str, sender_parent: str | None, recipient_id: str,
                     recipient_parent: str | None) -> str:
        label: str = original(sender_id, sender_parent, recipient_id, recipient_parent)
        if label == "*" and sender_parent is not None and recipient_parent is not None:
            return "sibling"
        return label

    return relationship


def _consume_at_claim(original: Callable[..., Any]) -> Callable[..., Any]:
    """An external session's check_mail consumes the mail it claims at once, not at the
    client's next call: a connection that ends before that call loses the mail."""

    def check_mail(tx: WriteTxn, ids: Any, session_id: str, agents: Any = None,
                   now: float | None = None, ttl: int = 0) -> Any:
        request = original(tx, ids, session_id, agents, now, ttl)
        if request is not None:
            runs.close(tx, session_id, request.run_id, request.request_id, True, now)
        return request

    return check_mail


def _cancel_claimed(original: Callable[..., Any]) -> Callable[..., Any]:
    """cancel_message reads a claimed message as released, so the sender recalls mail that
    is already inside the recipient's model request."""

    def _recall(tx: Any, message: Message) -> Message:
        if message.state == MessageState.CLAIMED:
            message = attrs.evolve(message, state=MessageState.RELEASED)
        recalled: Message = original(tx, message)
        return recalled

    return _recall


def _expiry_counts_claimed_time(original: Callable[..., Any]) -> Callable[..., Any]:
    """A claim does not stop a message's clock: after a release its age includes the time a
    request held it, so mail a failed request carried expires early."""

    def flip(message: Message, now: float | None) -> dict[str, Any]:
        del message, now
        return {}

    return flip


# name -> (module, attribute, wrong version of it)
PLANTS: dict[str, tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "pair-window": (sending, "check_inflight", _pair_window),
    "recover-keeps-claims": (runs, "_end", _recover_keeps_claims),
    "discard-claimed": (engine, "step_message", _discard_claimed),
    "no-hop-limit": (sending, "check_hops", _no_hop_limit),
    "idempotency-ignored": (sending, "IdempotencyKey", _idempotency_ignored),
    "digest-ignored": (sending, "arguments_digest", _digest_ignored),
    "producer-key-forgotten": (producers, "ProducerKey", _producer_key_forgotten),
    "producer-digest-ignored": (producers, "mail_digest", _producer_digest_ignored),
    "inbox-counts-plugin-mail": (transitions, "_track", _inbox_counts_plugin_mail),
    "handle-across-trees": (sending, "resolve", _handle_across_trees),
    "hop-wrong-base": (sending, "check_hops", _hop_wrong_base),
    "reply-hint-always": (runs, "render_mail", _reply_hint_always),
    "steer-never-joins": (runs, "admit_accepted", _steer_never_joins),
    "outside-text-raw": (runs, "render_mail", _outside_text_raw),
    "mode-retry-replays": (sending, "arguments_digest", _mode_retry_replays),
    "rule-before-liveness": (sending, "GUARDS", _rule_before_liveness),
    "session-grant-for-tree": (approvals, "_grant", _session_grant_for_tree),
    "revert-spares-descendants": (engine.Engine, "revert", _revert_spares_descendants),
    "cousin-as-sibling": (sending, "relationship", _cousin_as_sibling),
    "consume-at-claim": (external, "check_mail", _consume_at_claim),
    "cancel-claimed": (receipts, "_recall", _cancel_claimed),
    "expiry-counts-claimed-time": (runs, "flip", _expiry_counts_claimed_time),
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
