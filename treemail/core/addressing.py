"""Resolving a ``to`` reference to a session of the sender's tree.

A canonical UUID names a session anywhere; it must then share the sender's root
(``root_session_id`` equality is the whole tree-authorization contract, ghosts included).
Anything else is a handle, looked up among the *live* sessions of the sender's tree only, so a
handle of another tree, or of a reverted branch, never resolves. A miss lists the nearest
addressable peers (at most ``MAX_CANDIDATES``) so the model can repair its call.
"""

from __future__ import annotations

from treemail.core.envelope import render_description
from treemail.core.errors import NotTreePeer, UnknownSession, UnknownSubagentReference
from treemail.core.ids import canonical_uuid, storable
from treemail.core.records import Session
from treemail.core.store import ReadTxn

__all__ = ["MAX_CANDIDATES", "candidates", "describe_peer", "resolve"]


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
    """One candidate line: ``handle — description — status (session_id <uuid>)``. The
    description was written by a model: it is shown as one bounded line, never as lines of
    its own that would read as more candidates."""
    status = peer.state
    summary = render_description(peer.summary)
    if peer.handle is None:
        # A session stored before handles existed is named by its UUID, printed once.
        return f"{peer.session_id} — {summary} — {status}"
    return f"{peer.handle} — {summary} — {status} (session_id {peer.session_id})"


# A miss lists at most this many peers: with a thousand peers the full list was a 291 KB tool
# result, more than a model can use. The nearest relatives come first.
MAX_CANDIDATES = 20


def candidates(tx: ReadTxn, sender: Session) -> tuple[list[Session], int]:
    """The live peers a miss lists, and how many more there are: the sender's parent, then
    its children, then its siblings, then everyone else, each group in creation order."""
    peers = [peer for peer in tx.tree(sender.root_session_id)
             if peer.live and peer.session_id != sender.session_id]
    ranked = sorted(peers, key=lambda peer: _nearness(sender, peer))  # stable: creation order
    return ranked[:MAX_CANDIDATES], max(len(ranked) - MAX_CANDIDATES, 0)


def _nearness(sender: Session, peer: Session) -> int:
    if peer.session_id == sender.parent_session_id:
        return 0
    if peer.parent_session_id == sender.session_id:
        return 1
    if sender.parent_session_id is not None and peer.parent_session_id == sender.parent_session_id:
        return 2
    return 3


def _unknown_reference(tx: ReadTxn, sender: Session, reference: str) -> UnknownSubagentReference:
    peers, more = candidates(tx, sender)
    if peers:
        listing = "\n".join(f"- {describe_peer(peer)}" for peer in peers)
        rest = f"\n... and {more} more, not listed; ask your parent for the one you need"
        rest = rest if more else ""
        advice = f"Addressable peers of your tree:\n{listing}{rest}"
    else:
        advice = "Your tree has no other session to message."
    return UnknownSubagentReference(
        f"unknown subagent reference {reference!r}: it is neither a session id nor the "
        f"handle of a live session of your tree. {advice}",
        reference=reference,
        candidates=[peer.session_id for peer in peers],
        more=more,
    )
