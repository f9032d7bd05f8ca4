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
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from treemail.adapters.daemon.errors import NotOwner
from treemail.adapters.store.leases import Leases, SoleLeases, place
from treemail.core.errors import TreemailError
from treemail.protocol import methods as m
from treemail.protocol import types as t
from treemail.protocol.methods import Method

if TYPE_CHECKING:
    from treemail.adapters.daemon.routes import Handler
    from treemail.adapters.daemon.server import Daemon
    from treemail.adapters.runtime.runtime import Runtime

__all__ = ["Ownership"]

_log = logging.getLogger("treemail.daemon")

# The methods that write into a tree, and the param naming a session of it.
_TREE_WRITES: dict[Method[Any, Any], str] = {
    m.RUN_SUBMIT: "session_id", m.RUN_STEER: "session_id", m.RUN_CANCEL: "session_id",
    m.TOOL_CALL: "session_id", m.PLUGIN_PRODUCER_SEND: "session_id",
    m.SESSION_DELEGATE: "parent_session_id"}


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
        # A third of the lease renews it in time; at most a second, so that trees given up
        # or run out are taken within a second even when nothing is heard (polling).
        self.interval = min(duration / 3, 1.0)
        self.taken_over = 0  # trees claimed from a dead daemon, for tests and the log
        self._beat: asyncio.Task[None] | None = None
        self._adopting = asyncio.Lock()

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
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._poke.wait()
            self._poke.clear()
            try:
                await self.beat()
            except TreemailError as exc:  # the server away: the next beat tries again
                _log.warning("lease heartbeat failed: %s", exc)

    async def beat(self) -> None:
        """Renew our leases, stop driving the trees lost, take over the trees whose lease
        ran out."""
        lost = await asyncio.to_thread(self.leases.renew)
        if lost:
            _log.warning("lost trees %s to another daemon: stopped driving them",
                         ", ".join(lost))
            await self.runtime.drop(lost)
        expired = await asyncio.to_thread(self.leases.expired)
        if expired:
            await self._adopt(expired)

    async def _adopt(self, trees: Collection[str]) -> set[str]:
        async with self._adopting:
            taken = await asyncio.to_thread(self._claim_all, trees)
            if taken:
                dead = await self.runtime.adopt(taken)
                self.taken_over += len(taken)
                _log.info("took over trees %s (%d runs found dead)", ", ".join(sorted(taken)),
                          dead)
            return taken

    # -- requests --------------------------------------------------------------------------

    def guard(self, daemon: Daemon) -> None:
        """Wrap the handlers that need the tree's owner: writes into a tree, and
        ``session.create`` (placement); reads stay open to any daemon."""
        if not self.shared:
            return
        for method, field in _TREE_WRITES.items():
            daemon.handlers[method.name] = self._owned(daemon.handlers[method.name], field)
        create = m.SESSION_CREATE.name
        daemon.handlers[create] = self._placed(daemon.handlers[create])

    def _owned(self, handler: Handler, field: str) -> Handler:
        async def owned(conn: Any, params: Any) -> Any:
            await self.check(str(getattr(params, field)))
            return await handler(conn, params)

        return owned

    def _placed(self, handler: Handler) -> Handler:
        async def placed(conn: Any, params: Any) -> Any:
            members = await asyncio.to_thread(self.leases.members)
            target = place(members)
            if target is not None and target.holder != self.leases.holder:
                raise NotOwner(
                    f"new trees go to the daemon with the fewest live trees, at "
                    f"{target.address}; send session.create there", owner=target.address,
                    method="session.create")
            view = await handler(conn, params)
            assert isinstance(view, t.SessionView)
            await asyncio.to_thread(self.leases.claim, view.root_session_id)
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
