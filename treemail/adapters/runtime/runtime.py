"""The asyncio runtime: each session an actor, every engine call on one writer thread.

An actor drives its session run by run, model request by model request (``actor.py``).
Every engine call goes through ``Writer`` (``writer.py``): one thread owns the store, so
LMDB's single-writer rule holds and no fsync ever blocks the event loop. Mail to a session
pokes its actor; an actor idle for ``idle_timeout`` is evicted and spawned again by the next
poke.

Approvals: a tool call stopped by an ``ask`` rule is held durably, and the run waits on a
future keyed by the approval id until ``answer`` resolves it. The approval outlives the run:
after a restart the waiting run is dead (recovery interrupts it), yet answering still sends
exactly once (the engine runs the call), and the sender's next run sees the outcome where
the call was made (``history.rebuild``).

Plugins observe the durable feed live (``FeedFollower``), gate tool calls, and inject mail.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

import attrs

from treemail.adapters.runtime.actor import Actor, Incident
from treemail.adapters.runtime.budget import Budget
from treemail.adapters.runtime.clock import WallClock
from treemail.adapters.runtime.failures import FailurePolicy
from treemail.adapters.runtime.llm import Model, ToolCall
from treemail.adapters.runtime.plugins import FeedFollower, Plugin, PluginHost
from treemail.adapters.runtime.toolbox import ToolBox
from treemail.adapters.runtime.writer import Writer, tree_lanes
from treemail.adapters.store.group_commit import GroupStore
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import ApprovalRequired, EngineShutdown, NoRunInFlight
from treemail.core.external import is_external
from treemail.core.ids import IdSource
from treemail.core.lifecycle import SessionState
from treemail.core.records import (
    AgentSpec,
    Approval,
    ApprovalState,
    Event,
    Owner,
    Run,
    Session,
    ToolContext,
)
from treemail.core.store import Store

__all__ = ["CANCELLED_BY_USER", "DEFAULT_ACTOR_IDLE_TIMEOUT", "Agent", "Runtime"]

# An actor idle this long leaves memory; the next mail spawns it again from the log.
DEFAULT_ACTOR_IDLE_TIMEOUT = 30.0

_log = logging.getLogger("treemail.runtime")

T = TypeVar("T")


# The reason a run cancelled by its user ends with (``run.cancel``, ``treemail cancel``).
CANCELLED_BY_USER = "cancelled by user"

RESUME = ("The process restarted while you were working on your task. Your conversation so "
          "far is above; continue the task and finish it.")


@attrs.frozen
class Agent:
    """An agent the runtime can run: its spec (name, rules), model, and its doc's system
    prompt and messaging template (``treemail.core.prompts``)."""

    spec: AgentSpec
    model: Model
    prompt: str = ""
    # The template of the prompt's messaging section: None for the default, "" for none.
    messaging: str | None = None


class Runtime:
    def __init__(
        self,
        store: Store,
        ids: IdSource,
        agents: Mapping[str, Agent],
        config: MessagingConfig | None = None,
        *,
        idle_timeout: float = DEFAULT_ACTOR_IDLE_TIMEOUT,
        plugins: Sequence[Plugin] = (),
        max_model_failures: int = 3,
        failure_policy: FailurePolicy | None = None,
        shutdown_grace: float = 5.0,
        feed_interval: float = 0.05,
        budget: Budget | None = None,
    ) -> None:
        # Group commit: the engine writes through the writer's batches (see ``Writer``).
        group = GroupStore(store)
        self.agents = dict(agents)
        # Rules are read live from the agents' current docs, by name.
        self.engine = Engine(group, ids, config, agents=self._spec, clock=WallClock())
        self.plugins = PluginHost(plugins)
        # A store whose every statement is a round trip (PostgreSQL) says how long a group
        # commit may keep taking the calls queued behind it: LMDB's 5 ms would close a batch
        # after a call or two there.
        # A store with several write connections (PostgreSQL shared by daemons) gets that
        # many lanes: the trees' transactions commit side by side.
        self.writer = Writer(self._written, group=group,
                             max_wait=float(getattr(store, "batch_wait", 0.005)),
                             lanes=int(getattr(store, "writers", 1)),
                             lane_of=tree_lanes(self.engine))
        # The delegation tools' catalogue: kept beside ``agents`` by ``register``.
        self._specs = {name: a.spec for name, a in agents.items()}
        self.tools = ToolBox(self.engine, self.writer, self._specs,
                             self.plugins if self.plugins.gates else None)
        self.idle_timeout = idle_timeout
        # Each run's limits of model requests and tool calls (``budget.py``).
        self.budget = budget or Budget()
        # ``max_model_failures`` is the short form of a default policy with that limit.
        self.failure_policy = failure_policy or FailurePolicy(limit=max_model_failures)
        self.shutdown_grace = shutdown_grace
        self.feed_interval = feed_interval
        self.evictions = 0
        # An actor that dies of a bug must not vanish silently: quiesce re-raises it.
        self.crashes: list[BaseException] = []
        # Runs an actor stopped on an unexpected error (the actor lived on); see actor.py.
        self.incidents: list[Incident] = []
        self.closing = False
        self.killed = False
        self._actors: dict[str, Actor] = {}
        # External sessions (an MCP client drives them, no actor does): a poke for one is
        # handed to ``on_external`` (the daemon's wake-up notification) instead.
        self.external: set[str] = set()
        self.tools.external = self.external  # the same set: attached sessions join it
        self.on_external: Callable[[str], None] | None = None
        self._waiting: dict[str, asyncio.Future[Approval]] = {}
        self._follower: FeedFollower | None = None
        self._follow_task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, trees: Collection[str] | None = None) -> int:
        """Recover the store (dead runs interrupted, mail made deliverable), start following
        the feed for observers, attach plugins and spawn the actors that have work; only in
        ``trees`` (roots) when given: a daemon sharing its store drives the trees it owns.

        Returns how many runs recovery found dead."""
        if self.plugins.observers:
            # From the feed's end before recovery, so observers see what recovery records.
            head = await self.writer.quiet(self.engine.feed_end)
            self._follower = FeedFollower(self._read_feed, self.plugins, head,
                                          self.feed_interval)
            self._follow_task = asyncio.create_task(self._follower.follow(), name="feed")
        dead = await self._revive(trees)
        await self.plugins.attach(self.accept)
        await self._wake(trees)
        return dead

    async def adopt(self, trees: Collection[str]) -> int:
        """Drive ``trees`` (roots) from now on, taken over from a daemon that died: recover
        them as a start does (their dead runs interrupted, claimed mail released, stranded
        delegations resumed) and spawn the actors that have work. Returns the dead runs."""
        dead = await self._revive(trees)
        await self._wake(trees)
        return dead

    async def drop(self, trees: Collection[str]) -> None:
        """Stop driving ``trees``, which another daemon owns now: their actors are cancelled
        and write nothing more (the store refuses it anyway: ``store:fenced``)."""
        sessions: list[Session] = await self.writer.quiet(self.engine.sessions)
        gone = [s.session_id for s in sessions if s.root_session_id in trees]
        tasks = [actor.task for sid in gone if (actor := self._actors.pop(sid, None))]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _revive(self, trees: Collection[str] | None) -> int:
        dead: int = await self.writer(self.engine.recover, trees)
        # A delegated run that died after consuming its task has no mail left to wake it:
        # resume it with goal mail (auditable, outside the agent inbox cap).
        for stranded in await self.writer(self.engine.stranded_delegations, trees):
            await self.writer(self.engine.accept, stranded.session_id, RESUME, Owner.GOAL)
        # External sessions (an MCP client drives them) get no actor: a wake-up tells it.
        self.external |= await self.writer(self._external_sessions)
        return dead

    async def _wake(self, trees: Collection[str] | None) -> None:
        for session in await self.writer(self.engine.sessions):
            if session.state is SessionState.QUEUED and (
                    trees is None or session.root_session_id in trees):
                self.poke(session.session_id)

    async def shutdown(self, grace: float | None = None) -> None:
        """Refuse new sends and mail, let each actor stop at its next boundary (cancelling any
        still busy after ``grace`` seconds), and leave the store consistent: runs interrupted,
        claimed mail released, pending approvals kept for the next start."""
        if self.closing:
            return
        self.closing = True
        self.engine.shutdown()
        for waiting in self._waiting.values():
            waiting.cancel()
        tasks = [actor.task for actor in self._actors.values()]
        for actor in self._actors.values():
            actor.wake.set()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.shutdown_grace
                                         if grace is None else grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_following(flush=True)
        self.writer.close()

    async def abandon(self) -> None:
        """Stop at once and write nothing more, as if the process had died: what a crash
        leaves (running runs, claimed mail) stays for the next ``start`` to recover."""
        self.closing = self.killed = True
        self.engine.shutdown()
        tasks = [actor.task for actor in self._actors.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_following(flush=False)
        self.writer.close()

    async def _stop_following(self, flush: bool) -> None:
        if self._follower is None or self._follow_task is None:
            return
        if flush:
            self._follower.stop()
        else:
            self._follow_task.cancel()
        await asyncio.gather(self._follow_task, return_exceptions=True)
        if flush:
            await self._follower.pump()  # what the last actors wrote


    def _spec(self, name: str) -> AgentSpec | None:
        """The agent catalogue the engine reads permissions through."""
        agent = self.agents.get(name)
        return agent.spec if agent is not None else None

    def register(self, agents: Mapping[str, Agent]) -> None:
        """Add (or replace) agents by name: sessions created or delegated from now on may
        run them, and the delegation tools offer them."""
        self.agents.update(agents)
        self._specs.update({name: a.spec for name, a in agents.items()})

    def _external_sessions(self) -> set[str]:
        with self.engine.store.read() as tx:
            return {s.session_id for s in tx.sessions() if is_external(tx, s.session_id)}

    def resident(self, session_id: str) -> bool:
        """Whether the session's actor is in memory (not evicted)."""
        return session_id in self._actors

    # -- entry points ----------------------------------------------------------------------

    async def create_root(self, agent: str, task: str | None = None) -> Session:
        """A new tree; with ``task``, its first user input, in the same transaction."""
        if task is not None and self.closing:
            raise EngineShutdown("the runtime is shutting down; nothing was created")
        spec = self.agent(agent).spec
        session: Session = await self.writer(lambda: self.engine.create_root(spec, task=task))
        if task is not None:
            self.poke(session.session_id)
        return session

    async def accept(self, session_id: str, text: str, owner: Owner = Owner.USER,
                     key: str | None = None) -> str:
        """User or plugin input: durable mail that wakes the session; ``key`` is an optional
        idempotency key (see ``treemail.core.producers``)."""
        if self.closing:
            raise EngineShutdown("the runtime is shutting down; nothing was accepted")
        message_id: str = await self.writer(  # the session first: its tree's lane
            self.engine.accept, session_id, text, owner, key=key)
        self.poke(session_id)
        return message_id

    async def fork(self, session_id: str) -> Session:
        """Fork a session's history into a new session beside it (see ``Engine.fork``)."""
        forked: Session = await self.writer(self.engine.fork, session_id)
        return forked

    async def revert(self, session_id: str) -> list[str]:
        """Revert the branch that created ``session_id``; its sessions become ghosts."""
        ghosts: list[str] = await self.writer(self.engine.revert, session_id)
        return ghosts

    async def pending_approvals(self) -> list[Approval]:
        """Tool calls held by ``ask`` rules, waiting for ``answer``; they survive restarts."""
        return await self.writer(self.engine.approvals)

    async def answer(self, approval_id: str, approve: bool, scope: str = "once",
                     reason: str | None = None) -> Approval:
        """The user's answer: approving grants ``scope`` and sends now, once; denying answers
        the call with permission:denied. A run still waiting gets the outcome as its tool
        result; a dead run's session sees it in its next run."""
        if self.closing:
            raise EngineShutdown("the runtime is shutting down; answer after the next start")
        answered: Approval = await self.writer(self.engine.answer_approval, approval_id,
                                               approve, scope, reason)
        waiting = self._waiting.get(approval_id)
        if waiting is not None and not waiting.done():
            waiting.set_result(answered)
        recipient = await self.writer(self.tools.recipient_of, answered.outcome)
        if recipient is not None:
            self.poke(recipient)
        return answered

    def poke(self, session_id: str) -> None:
        """Tell a session it may have work; spawn its actor if it was evicted."""
        if self.closing:
            return
        if session_id in self.external:
            if self.on_external is not None:
                self.on_external(session_id)
            return
        actor = self._actors.get(session_id)
        if actor is None or actor.task.done():
            actor = Actor(self, session_id)
            self._actors[session_id] = actor
            actor.task = asyncio.create_task(actor.live(), name=f"actor {session_id}")
        actor.wake.set()

    async def interrupted(self, session_id: str) -> None:
        """Its run was ended from outside (cancel_subagent): stop the actor still driving it,
        which would otherwise fail on the dead run, and spawn a fresh one if mail waits."""
        actor = self._actors.pop(session_id, None)
        if actor is not None and not actor.task.done():
            actor.task.cancel()
            await asyncio.gather(actor.task, return_exceptions=True)
        self.poke(session_id)

    async def cancel(self, session_id: str, reason: str = CANCELLED_BY_USER) -> Run:
        """The user's cancel of the session's run in flight: stop the actor driving it (it
        writes nothing more), then interrupt the run. An open request is aborted, so its
        claimed mail is released; the session stays idle, its mail kept, until new input
        wakes it; a delegating parent is told why. Raises ``NoRunInFlight`` when the session
        has no queued or running run (also when it ended before the cancel reached it)."""
        if self.closing:
            raise EngineShutdown("the runtime is shutting down; its runs stop on their own")
        await self._in_flight(session_id)  # refused before the actor is touched
        actor = self._actors.pop(session_id, None)
        if actor is not None and not actor.task.done():
            actor.silenced = True
            actor.task.cancel()
            await asyncio.gather(actor.task, return_exceptions=True)
        # Read again: the run may have ended while its actor stopped.
        run_id = await self._in_flight(session_id)
        session: Session = await self.writer(self.engine.session, session_id)
        told = await self.writer(self.engine.give_up_run, session_id, run_id, reason)
        if told and session.parent_session_id is not None:
            self.poke(session.parent_session_id)
        ended: Run = await self.writer.quiet(self.engine.run, run_id)
        return ended

    async def _in_flight(self, session_id: str) -> str:
        """The id of the session's queued or running run; ``NoRunInFlight`` if none."""
        session: Session = await self.writer.quiet(self.engine.session, session_id)
        if session.run_id is None or not session.state.has_run:
            raise NoRunInFlight(
                f"session {session.reference} has no run in flight (it is {session.state}); "
                "nothing was cancelled",
                session_id=session_id, state=str(session.state))
        return session.run_id

    async def quiesce(self, timeout: float = 30.0) -> None:
        """Wait until no session has a queued or running run and no actor is busy, then let
        observers catch up with the feed. A run waiting on an approval counts as busy."""
        loud: list[str] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self.crashes:
                        raise self.crashes[0]
                    sessions: list[Session] = await self.writer.quiet(self.engine.sessions)
                    busy = {sid for sid, actor in self._actors.items() if actor.busy}
                    loud = [f"{s.reference} ({s.state})" for s in sessions
                            if s.session_id in busy or s.state.has_run]
                    if not loud:
                        break
                    await asyncio.sleep(0.01)
        except TimeoutError:
            raise TimeoutError(f"not quiet after {timeout}s: {', '.join(loud)}") from None
        if self._follower is not None:
            await self._follower.pump()

    # -- for actors ------------------------------------------------------------------------

    def agent(self, name: str) -> Agent:
        agent = self.agents.get(name)
        if agent is None:
            raise KeyError(f"no agent {name!r}; known agents: {', '.join(self.agents)}")
        return agent

    def crashed(self, error: BaseException) -> None:
        self.crashes.append(error)
        _log.error("an actor crashed: %s: %s", type(error).__name__, error)

    def incident(self, incident: Incident) -> None:
        self.incidents.append(incident)
        # Kept for tests, and told to whoever runs the process: a give-up must not be silent.
        _log.error("%s", incident)

    def evicted(self, actor: Actor) -> None:
        if self._actors.get(actor.session_id) is actor:
            del self._actors[actor.session_id]
            self.evictions += 1

    async def await_answer(self, ctx: ToolContext, call: ToolCall,
                           waiting: ApprovalRequired) -> str:
        """Hold the call durably and wait for the user's answer; its outcome is the result."""
        approval_id = Approval.id_for(ctx)
        # Registered before the hold: an answer that comes right after finds the waiter.
        future: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
        self._waiting[approval_id] = future
        try:
            arguments = call.arguments if isinstance(call.arguments, dict) else {}
            held: Approval = await self.writer(self.engine.hold_for_approval, ctx, call.name,
                                               arguments, str(waiting.details.get("label")))
            answered = held if held.state is not ApprovalState.PENDING else await future
        finally:
            self._waiting.pop(approval_id, None)
        return answered.outcome.text() if answered.outcome is not None else ""

    def feed_grew(self) -> None:
        """Another process appended to the feed (a daemon sharing the store): observers
        read it now rather than at their next poll."""
        self._written()

    def _written(self) -> None:
        if self._follower is not None:
            self._follower.notify()

    async def _read_feed(self, after: int) -> list[tuple[int, Event]]:
        return await self.writer.quiet(self.engine.feed, after)
