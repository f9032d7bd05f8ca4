"""Which trees this daemon drives, when several daemons serve one PostgreSQL store.

Each tree is owned by one daemon at a time through a lease with a fencing token
(``treemail.adapters.store.leases``); the store refuses a write of a daemon whose lease was
taken (``store:fenced``). This module is the daemon's side of it:

* at start the daemon joins the store's members, claims every tree nobody holds live (those
  of a store used before, or of a daemon that died), and recovers only those;
* a heartbeat every third of the lease (at most a second) renews its leases; a tree it
  lost (it stalled past its lease and another took it) has its actors stopped; a tree
  whose lease ran out (its daemon died) is claimed and recovered as after a restart: runs
  interrupted, claimed mail released, and the mail accepted before the death delivered
  once, by this daemon;
* wake-ups: with ``[daemon.cluster] wakeups = "notify"`` (the default) the daemon LISTENs
  on the store's channel: another daemon's feed events reach its observers and
  subscriptions at once, and trees given up by a daemon that stops are taken at once; with
  ``"poll"`` (a server or pooler without NOTIFY) the feed is polled and the heartbeat finds
  released trees;
* placement: ``session.create`` makes the tree on the live member holding the fewest live
  trees (ties by holder id); asked elsewhere, the daemon answers ``daemon:not_owner`` naming
  where to ask, as it does for a write to a tree another daemon owns. Reads are served by
  any daemon: they all read the one store. A Python client follows the redirect once
  (``DaemonClient.call``).

A store one process holds whole (LMDB) has ``SoleLeases``: the daemon owns every tree, and
none of this changes what it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from treemail.adapters.daemon.errors import NotOwner
from treemail.adapters.store.leases import Leases, SoleLeases, place
from treemail.core import external
from treemail.core.errors import TreemailError
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.methods import BOUND, METHODS, Method

if TYPE_CHECKING:
    from treemail.adapters.daemon.routes import Handler
    from treemail.adapters.daemon.server import Daemon
    from treemail.adapters.runtime.runtime import Runtime

__all__ = ["Ownership", "tree_writes"]

_log = logging.getLogger("treemail.daemon")

Finder = Callable[[Any, Any], Awaitable[str | None]]


class Ownership:
    """The trees this daemon owns in a shared store, kept by a heartbeat."""

    def __init__(self, leases: Leases, runtime: Runtime, address: str,
                 duration: float, wakeups: str = "notify") -> None:
        self.leases = leases
        self.runtime = runtime
        self.address = address
        self.duration = duration
        self.shared = not isinstance(leases, SoleLeases)
        self.notified = self.shared and wakeups == "notify"
        self._poke = asyncio.Event()  # a beat now: another daemon gave trees up
        self._chore = asyncio.Event()  # a renewal done: drop, take over, recover
        self._lost: set[str] = set()  # trees a renewal found lost, not dropped yet
        # A third of the lease renews it in time; at most a second, so that trees given up
        # or run out are taken within a second even when nothing is heard (polling).
        self.interval = min(duration / 3, 1.0)
        self.taken_over = 0  # trees claimed from a dead daemon, for tests and the log
        self._beat: asyncio.Task[None] | None = None
        self._adopting = asyncio.Lock()
        # Trees claimed whose recovery failed (the store refused it, or went away): held,
        # so no other daemon recovers them, hence recovered again at each beat until done.
        self._unrecovered: set[str] = set()

    async def start(self) -> Collection[str] | None:
        """Join the store's members and claim the trees nobody holds live; returns the
        trees the runtime should recover and drive (None: every tree, a store held whole)."""
        if not self.shared:
            return None
        await asyncio.to_thread(self.leases.join, self.address, self.duration)
        sessions = await self.runtime.writer.quiet(self.runtime.engine.sessions)
        roots = [s.session_id for s in sessions if s.session_id == s.root_session_id]
        return await asyncio.to_thread(self._claim_all, roots)

    def _claim_all(self, roots: Collection[str]) -> set[str]:
        return {root for root in roots if self.leases.claim(root).holder == self.leases.holder}

    def begin(self) -> None:
        """Start the heartbeat (after the runtime started)."""
        if self.shared and self._beat is None:
            self._beat = asyncio.create_task(self._heartbeat(), name="lease heartbeat")
            if self.notified:
                loop = asyncio.get_running_loop()

                def heard(note: str) -> None:  # on the listener's thread
                    loop.call_soon_threadsafe(self._heard, note)

                self.leases.listen(heard)

    def _heard(self, note: str) -> None:
        """On the loop: another daemon grew the feed (``w:``), gave trees up (``r:``), or
        notifications may have been missed (``""``)."""
        if not note.startswith("r:"):
            self.runtime.feed_grew()
        if not note.startswith("w:"):
            self._poke.set()

    async def stop(self) -> None:
        """Stop the heartbeat and give every tree up at once, for another daemon to take
        without waiting for the leases to run out (the runtime has stopped writing)."""
        if self._beat is not None:
            self._beat.cancel()
            await asyncio.gather(self._beat, return_exceptions=True)
            self._beat = None
        if self.shared:
            try:
                await asyncio.to_thread(self.leases.leave)
            except TreemailError as exc:  # the leases run out on their own
                _log.warning("could not give the trees up on the way out: %s", exc)

    async def _heartbeat(self) -> None:
        """Renew on time, whatever else is going on: the renewal runs on its own, and the
        chores it finds (trees to drop, to take over, to recover) run beside it. A beat that
        waited for a takeover's recovery (seconds, under load) let this daemon's own leases
        lapse, and its trees change hands for nothing."""
        chores = asyncio.create_task(self._chores(), name="lease chores")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval):
                        await self._poke.wait()
                self._poke.clear()
                try:
                    self._lost.update(await self._renew())
                except TreemailError as exc:  # the server away: the next beat tries again
                    _log.warning("lease heartbeat failed: %s", exc)
                    continue
                self._chore.set()
        finally:
            chores.cancel()
            await asyncio.gather(chores, return_exceptions=True)

    async def _chores(self) -> None:
        while True:
            await self._chore.wait()
            self._chore.clear()
            try:
                await self._settle()
            except TreemailError as exc:  # tried again at the next beat
                _log.warning("lease heartbeat failed: %s", exc)

    async def beat(self) -> None:
        """Renew our leases, stop driving the trees lost, take over the trees whose lease
        ran out (one heartbeat, all in turn)."""
        self._lost.update(await self._renew())
        await self._settle()

    async def _renew(self) -> list[str]:
        lost: list[str] = await asyncio.to_thread(self.leases.renew)
        return lost

    async def _settle(self) -> None:
        """Stop driving the trees lost, take over those whose lease ran out, and recover
        those claimed but not recovered yet."""
        async with self._adopting:
            # A tree claimed back since (a request found its lease run out) is driven by
            # the actors its recovery spawned: those are not dropped.
            held = self.leases.held()
            lost, self._lost = sorted(t for t in self._lost if t not in held), set()
            if lost:
                _log.warning("lost trees %s to another daemon: stopped driving them",
                             ", ".join(lost))
                await self.runtime.drop(lost)
            self._unrecovered -= set(lost)
        expired = await asyncio.to_thread(self.leases.expired)
        if expired:
            await self._adopt(expired)
        if self._unrecovered:
            await self._adopt(())

    async def _adopt(self, trees: Collection[str]) -> set[str]:
        """Claim ``trees`` (those whose lease ran out) and recover the ones claimed, with
        any claimed before whose recovery failed. A tree is recovered once claimed, or
        again at the next beat: a claimed tree left unrecovered (its dead run in flight, its
        mail claimed) would be stuck for good, since its live lease keeps others out."""
        async with self._adopting:
            taken = await asyncio.to_thread(self._claim_all, trees) if trees else set()
            # Only the trees still held: one lost meanwhile is its new owner's to recover.
            due = (self._unrecovered | taken) & set(self.leases.held())
            self._unrecovered = set(due)
            if due:
                try:
                    dead = await self.runtime.adopt(due)
                except TreemailError as exc:
                    _log.warning("could not recover trees %s yet (%s); trying again at the "
                                 "next beat", ", ".join(sorted(due)), exc)
                    raise
                self._unrecovered.clear()
                self.taken_over += len(due)
                _log.info("took over trees %s (%d runs found dead)", ", ".join(sorted(due)),
                          dead)
            return taken

    # -- requests --------------------------------------------------------------------------

    def guard(self, daemon: Daemon) -> None:
        """Wrap the handlers that need the tree's owner: writes into a tree (an external
        session's included), and ``session.create`` (placement); reads stay open to any
        daemon."""
        if not self.shared:
            return
        for method in tree_writes():
            daemon.handlers[method.name] = self._owned(daemon.handlers[method.name],
                                                       self._finder(daemon, str(method.writes)))
        create = m.SESSION_CREATE.name
        daemon.handlers[create] = self._placed(daemon.handlers[create])

    def _finder(self, daemon: Daemon, writes: str) -> Finder:
        """How a request of a method marked ``writes`` finds the session whose tree it
        writes. external.bind is checked too (it names a token), so that a connection is
        bound where its session's tree is, and its calls are served there."""
        if writes == BOUND:
            gate = daemon.external

            async def bound(conn: Any, params: Any) -> str | None:
                return None if gate is None else gate.session_of(conn)

            return bound
        special: dict[str, Finder] = {"approval_id": self._of_approval, "token": self._of_token,
                                      "token_id": self._of_token_id}
        return special.get(writes) or _param(writes)

    def _owned(self, handler: Handler, find: Finder) -> Handler:
        async def owned(conn: Any, params: Any) -> Any:
            session_id = await find(conn, params)
            if session_id is not None:
                await self.check(session_id)
            return await handler(conn, params)

        return owned

    async def _of_token(self, conn: Any, params: Any) -> str | None:
        """The session a token binds (None for a token the handler refuses anyway)."""
        def read() -> str:
            with self.runtime.engine.store.read() as tx:
                return external.resolve(tx, str(params.token)).session_id

        try:
            found: str = await self.runtime.writer.quiet(read)
        except TreemailError:
            return None
        return found

    async def _of_approval(self, conn: Any, params: Any) -> str | None:
        """The session whose call an approval holds (None for an unknown approval: the
        handler refuses it as it always does)."""
        def read() -> str | None:
            with self.runtime.engine.store.read() as tx:
                held = tx.approval(str(params.approval_id))
                return None if held is None else held.session_id

        found: str | None = await self.runtime.writer.quiet(read)
        return found

    async def _of_token_id(self, conn: Any, params: Any) -> str | None:
        def read() -> str | None:
            with self.runtime.engine.store.read() as tx:
                return next((info.session.session_id for info in external.tokens(tx)
                             if info.token_id == params.token_id), None)

        found: str | None = await self.runtime.writer.quiet(read)
        return found

    def _placed(self, handler: Handler) -> Handler:
        async def placed(conn: Any, params: Any) -> Any:
            members = await asyncio.to_thread(self.leases.members)
            target = place(members)
            if target is not None and target.holder != self.leases.holder:
                raise NotOwner(
                    f"new trees go to the daemon with the fewest live trees, at "
                    f"{target.address}; send session.create there", owner=target.address,
                    method="session.create")
            # The tree's lease is taken by the transaction that creates it (the store's
            # fence leases a tree nobody leased before), so no daemon ever sees the tree
            # without its owner.
            view = await handler(conn, params)
            assert isinstance(view, t.SessionView)
            return view

        return placed

    async def check(self, session_id: str) -> None:
        """Pass if this daemon owns the tree of ``session_id`` (taking it first if its
        lease ran out), else ``daemon:not_owner`` naming the owner. An unknown session
        passes: the handler refuses it as it always does."""
        try:
            session = await self.runtime.writer.quiet(self.runtime.engine.session, session_id)
        except TreemailError:
            return
        root = session.root_session_id
        if root in self.leases.held():
            return
        lease = await asyncio.to_thread(self.leases.lease, root)
        if lease is None or not lease.live:
            if root in await self._adopt([root]):
                return
            lease = await asyncio.to_thread(self.leases.lease, root)
        if lease is not None and lease.holder != self.leases.holder:
            raise NotOwner(f"tree {root} is owned by the daemon at {lease.address}; send "
                           "the request there", owner=lease.address, tree=root)


def tree_writes() -> list[Method[Any, Any]]:
    """The methods that write into a tree (``Method.writes``): a daemon sharing its store
    serves them only for the trees it owns."""
    return [method for method in METHODS.values() if method.writes is not None]


def _param(field: str) -> Finder:
    """The session a request names in ``field`` of its params."""
    async def find(conn: Any, params: Any) -> str | None:
        return str(getattr(params, field))

    return find
