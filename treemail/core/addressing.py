"""Resolving a ``to`` reference to a session of the sender's tree.

A canonical UUID names a session anywhere; it must then share the sender's root
(``root_session_id`` equality is the whole tree-authorization contract, ghosts included).
Anything else is a handle, looked up among the *live* sessions of the sender's tree only, so a
handle of another tree, or of a reverted branch, never resolves. A miss lists every other
addressable peer so the model can repair its call.
"""

from __future__ import annotations

from treemail.core.errors import NotTreePeer, UnknownSession, UnknownSubagentReference
from treemail.core.ids import canonical_uuid, storable
from treemail.core.records import Session
from treemail.core.store import ReadTxn

__all__ = ["describe_peer", "resolve"]


def resolve(tx: ReadTxn, sender: Session, reference: str) -> Session:
    """The session ``reference`` names, or the typed refusal for why it names none."""
    session_id = canonical_uuid(reference)
    if session_id is not None:
        return _by_uuid(tx, sender, session_id)
    owner = tx.handle_owner(sender.root_session_id, reference) if storable(reference) else None
    recipient = tx.session(owner) if owner is not None else None
    if recipient is None:
        raise _unknown_reference(tx, sender, reference)
    return recipient


def _by_uuid(tx: ReadTxn, sender: Session, session_id: str) -> Session:
    recipient = tx.session(session_id)
    if recipient is None:
        raise UnknownSession(
            f"no session has id {session_id}; check the id you were given, "
            "or address a peer of your tree by its handle",
            session_id=session_id,
        )
    if recipient.root_session_id != sender.root_session_id:
        raise NotTreePeer(
            f"session {session_id} is not in your delegation tree; "
            "you can only message sessions of your own tree",
            session_id=session_id,
        )
    return recipient


def describe_peer(peer: Session) -> str:
    """One candidate line: ``handle — description — status (session_id <uuid>)``."""
    status = peer.state
    if peer.handle is None:
        # A session stored before handles existed is named by its UUID, printed once.
        return f"{peer.session_id} — {peer.agent.description} — {status}"
    return f"{peer.handle} — {peer.agent.description} — {status} (session_id {peer.session_id})"


def _unknown_reference(tx: ReadTxn, sender: Session, reference: str) -> UnknownSubagentReference:
    peers = [
        peer
        for peer in tx.tree(sender.root_session_id)
        if peer.live and peer.session_id != sender.session_id
    ]
    if peers:
        listing = "\n".join(f"- {describe_peer(peer)}" for peer in peers)
        advice = f"Addressable peers of your tree:\n{listing}"
    else:
        advice = "Your tree has no other session to message."
    return UnknownSubagentReference(
        f"unknown subagent reference {reference!r}: it is neither a session id nor the "
        f"handle of a live session of your tree. {advice}",
        reference=reference,
        candidates=[peer.session_id for peer in peers],
    )
