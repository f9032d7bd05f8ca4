"""Mail from outside the agents: user turns and steering, plugin mail, delegation tasks and
goal prompts. Its checks, and the keyed replay that makes a producer's send safe to retry.

A client that sent ``run.submit`` and lost the answer (a dropped connection, a killed daemon)
cannot tell whether the mail was accepted: without a key it must either send again (and maybe
deliver twice) or give up (and maybe lose it). With an idempotency key, the retry is answered
with the first accept's message id, and nothing is written; the same key with other mail is
a typed refusal, never a silent success. This is the design of send_message's replay (a
digest of the arguments is stored with the key), keyed by what a producer has instead of a
tool call: the recipient session, the producer's kind, and the client's key (``ProducerKey``).

The key is remembered in the transaction that accepts the mail, so an accept and its key are
durable together or not at all: a crash cannot leave one without the other.
"""

from __future__ import annotations

import attrs

from treemail.core.errors import InvalidRequest, PluginBodyTooLarge, ProducerKeyConflict
from treemail.core.ids import MAX_REFERENCE, IdSource, storable
from treemail.core.records import Mode, Owner, ProducerKey, SendResult
from treemail.core.runs import need_session
from treemail.core.sending import REPORTED, text_digest
from treemail.core.store import WriteTxn
from treemail.core.transitions import accept

__all__ = [
    "PLUGIN_BODY_MAX_BYTES",
    "Produced",
    "check_key",
    "check_mail",
    "mail_digest",
    "produce",
]

# The contract's cap on plugin mail, in UTF-8 bytes. It holds for every way plugin mail
# enters (the wire's plugin/producer/send, an in-process plugin's handle), because both
# pass through ``check_mail``.
PLUGIN_BODY_MAX_BYTES = 256 * 1024


@attrs.frozen
class Produced:
    """An accept as its producer sees it: the message id, the mode asked for, and the
    recipient's state when the mail was accepted; ``replayed`` when a keyed retry found it."""

    result: SendResult
    replayed: bool = False


def check_mail(body: str, owner: Owner, what: str = "mail body") -> None:
    """Outside mail must hold text (like every other mail), and plugin mail fits its cap."""
    if not body.strip():
        raise InvalidRequest(f"the {what} is empty or only whitespace; give the recipient "
                             "some text")
    if owner is Owner.PLUGIN:
        size = len(body.encode("utf-8", "surrogatepass"))
        if size > PLUGIN_BODY_MAX_BYTES:
            raise PluginBodyTooLarge(
                f"plugin mail of {size} bytes is over the cap of {PLUGIN_BODY_MAX_BYTES} "
                "bytes (256 KiB); nothing was accepted; split it or send a reference",
                size=size, limit=PLUGIN_BODY_MAX_BYTES)


def check_key(key: str) -> None:
    if not storable(key):
        raise InvalidRequest(
            "an idempotency key must be printable text of 1 to "
            f"{MAX_REFERENCE} bytes of UTF-8 (a UUID is a good key); nothing was accepted",
            idempotency_key=key[:64])


def mail_digest(body: str, mode: Mode, sender: str | None) -> str:
    """What identifies one producer send for replay: its text, its mode and its sender."""
    return text_digest(body, mode.value, sender or "")


def produce(
    tx: WriteTxn, ids: IdSource, recipient: str, body: str, owner: Owner, sender: str | None,
    mode: Mode, key: str | None,
) -> Produced:
    """Accept outside mail in ``tx``; with a key, answer a retry from the key's row instead.

    The replay is looked up before the recipient is: a true retry gets its first answer
    whatever has happened to the session since."""
    digest = mail_digest(body, mode, sender)
    scoped = ProducerKey(recipient, owner, key) if key is not None else None
    if scoped is not None:
        original = tx.recall(scoped)
        if original is not None:
            if original.digest != digest:
                raise ProducerKeyConflict(
                    f"idempotency key {key!r} already sent other {owner.value} mail to "
                    f"session {recipient} (message {original.message_id}); a retry must "
                    "repeat the mail exactly; new mail needs a new key",
                    idempotency_key=key, message_id=original.message_id)
            return Produced(original, replayed=True)
    session = need_session(tx, recipient)
    message = accept(tx, ids, session.session_id, body, owner, sender, mode)
    result = SendResult(message.message_id, mode, REPORTED[session.state], digest)
    if scoped is not None:
        tx.remember(scoped, result)
    return Produced(result)
