"""Fixtures and helpers for the unit tests of the core: a world of sessions on one engine.

``World`` wraps an ``Engine`` with the few moves every test needs: build a tree, start a run,
send from a fresh tool call, drain a session's mail, restart after a simulated crash, and
snapshot the whole store so a refusal can be shown to change nothing.

The ``store`` fixture is parametrized over store kinds; adding one is one entry in ``STORES``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from treemail.core import keys
from treemail.core.config import MessagingConfig
from treemail.core.engine import Delivery, Engine
from treemail.core.ids import CountingIds
from treemail.core.keys import CounterName
from treemail.core.lifecycle import SessionState
from treemail.core.memory_store import MemoryStore
from treemail.core.permissions import LABELS, Rules
from treemail.core.records import (
    AgentSpec,
    GrantScope,
    IdempotencyKey,
    Owner,
    Run,
    SendResult,
    Session,
    ToolContext,
)
from treemail.core.sending import grant_counter
from treemail.core.store import Store, WriteTxn
from treemail.testing.postgres import PostgresCluster

# ``TREEMAIL_TEST_STORES`` (comma-separated kinds) narrows the run, e.g. to ``memory`` for the
# mutation run, where the LMDB and PostgreSQL params would only repeat the same core paths
# more slowly. ``postgresql`` runs on the session's throwaway server (``postgres_cluster`` in
# tests/conftest.py), which fails these tests, saying what to install, where there is none.
STORES = [
    kind.strip()
    for kind in os.environ.get("TREEMAIL_TEST_STORES", "memory,lmdb,postgresql").split(",")
    if kind.strip()
]


def open_store(kind: str, directory: Path, server: PostgresCluster | None = None) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "lmdb":
        from treemail.adapters.store.lmdb_store import LmdbStore

        return LmdbStore.open(directory / "db", sync=False)
    if kind == "postgresql" and server is not None:
        from treemail.adapters.store.postgres_store import PostgresStore

        return PostgresStore.open(server.url(), sync=False)
    raise ValueError(f"unknown store kind {kind!r}")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind = str(request.param)
    server = request.getfixturevalue("postgres_cluster") if kind == "postgresql" else None
    opened = open_store(kind, tmp_path, server)
    yield opened
    opened.close()


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


@pytest.fixture
def engine(world: World) -> Engine:
    return world.engine


def agent(
    name: str, rules: Mapping[str, str] | None = None, description: str | None = None
) -> AgentSpec:
    """An agent spec; ``rules`` is the ``permissions.message`` table (None: no rules)."""
    return AgentSpec(
        name=name,
        description=description if description is not None else f"the {name} agent",
        rules=Rules.of(rules or {}),
    )


class World:
    """One engine over one store, and the moves tests make with it."""

    def __init__(self, store: Store, config: MessagingConfig | None = None) -> None:
        self.store = store
        self.engine = Engine(store, CountingIds(), config)
        self._calls = itertools.count(1)
        self._restarts = 0

    # -- configuration and restarts ------------------------------------------------------

    def configure(self, **settings: Any) -> MessagingConfig:
        self.engine.config = attrs.evolve(self.engine.config, **settings)
        return self.engine.config

    def restart(self) -> Engine:
        """A new engine on the same store, as after a crash; ids continue in a new namespace."""
        self._restarts += 1
        self.engine = Engine(self.store, CountingIds(namespace=self._restarts), self.engine.config)
        return self.engine

    # -- building trees ------------------------------------------------------------------

    def root(
        self,
        name: str = "root",
        rules: Mapping[str, str] | None = None,
        *,
        description: str | None = None,
        legacy: bool = False,
    ) -> Session:
        return self.engine.create_root(agent(name, rules, description), legacy=legacy)

    def child(
        self,
        parent: Session,
        name: str,
        rules: Mapping[str, str] | None = None,
        *,
        description: str | None = None,
        legacy: bool = False,
    ) -> Session:
        spec = agent(name, rules, description)
        return self.engine.delegate(parent.session_id, spec, f"task for {name}", legacy=legacy)

    def fresh(self, session: Session) -> Session:
        return self.engine.session(session.session_id)

    def set_rules(self, session: Session, rules: Mapping[str, str]) -> None:
        """Rewrite a stored session's message rules (an edited agent doc)."""

        def work(tx: WriteTxn) -> None:
            stored = tx.session(session.session_id)
            assert stored is not None
            new_agent = attrs.evolve(stored.agent, rules=Rules.of(rules))
            tx.put_session(attrs.evolve(stored, agent=new_agent))

        self.store.transact(work)

    # -- runs and tool calls -------------------------------------------------------------

    def activate(self, session: Session) -> Run:
        """Make ``session`` running and return its run, waking it with user mail if needed."""
        current = self.fresh(session)
        if current.state == SessionState.RUNNING and current.run_id is not None:
            return self.engine.run(current.run_id)
        if current.state in (SessionState.IDLE, SessionState.FINISHED):
            self.engine.accept(session.session_id, "go on", Owner.USER)
        return self.engine.start_run(session.session_id)

    def ctx(self, session: Session, call: str | None = None) -> ToolContext:
        """A tool call of the session's running run (started first if need be)."""
        run = self.activate(session)
        return ToolContext(session.session_id, run.run_id, call or f"call-{next(self._calls)}")

    def send(
        self,
        sender: Session | ToolContext,
        to: Session | str,
        body: str = "hello",
        mode: str | None = None,
    ) -> SendResult:
        """Send from a fresh tool call (or the given one) to a session or a raw reference."""
        ctx = sender if isinstance(sender, ToolContext) else self.ctx(sender)
        return self.engine.send_message(ctx, arguments(to, body, mode))

    # -- draining --------------------------------------------------------------------------

    def drain(self, session: Session, *, finish: bool = True) -> list[Delivery]:
        """Run the session over its mail: begin/commit requests until none claims any."""
        run = self.activate(session)
        delivered: list[Delivery] = []
        while True:
            request = self.engine.begin_request(session.session_id, run.run_id)
            self.engine.commit_request(session.session_id, run.run_id, request.request_id)
            delivered.extend(request.deliveries)
            if not request.deliveries:
                break
        if finish:
            self.engine.finish_run(session.session_id, run.run_id)
        return delivered

    def consume_all(self, session: Session) -> list[Delivery]:
        """Drain and finish, and keep going while finishing wakes the session again."""
        delivered = self.drain(session)
        while self.fresh(session).state == SessionState.QUEUED:
            delivered.extend(self.drain(session))
        return delivered

    # -- observing -------------------------------------------------------------------------

    def kinds(self, session: Session, message_id: str) -> list[str]:
        """The event kinds a message went through, in log order."""
        return [
            event.kind
            for event in self.engine.events(session.session_id)
            if event.data.get("message_id") == message_id
        ]

    def pending_agent_mail(self, session: Session) -> int:
        return sum(1 for m in self.engine.pending(session.session_id) if m.owner is Owner.AGENT)

    def snapshot(self, *ctxs: ToolContext) -> dict[str, object]:
        """Everything the store holds that a send could touch, read through the public port."""
        with self.store.read() as tx:
            sessions = list(tx.sessions())
            ids = [s.session_id for s in sessions]
            names = _counter_names(sessions, ctxs)
            return {
                "sessions": sessions,
                "runs": [tx.run(s.run_id) for s in sessions if s.run_id is not None],
                "pending": {sid: list(tx.pending(sid)) for sid in ids},
                "events": {sid: list(tx.events(sid)) for sid in ids},
                "counters": {name: tx.count(CounterName(name)) for name in names},
                "replays": [tx.recall(IdempotencyKey.of(ctx)) for ctx in ctxs],
                "feed": list(tx.feed()),
                "approvals": list(tx.approvals()),
            }


def arguments(to: Session | str, body: str = "hello", mode: str | None = None) -> dict[str, str]:
    reference = to if isinstance(to, str) else to.reference
    args = {"to": reference, "body": body}
    if mode is not None:
        args["mode"] = mode
    return args


def _counter_names(sessions: list[Session], ctxs: tuple[ToolContext, ...]) -> list[str]:
    names = ["sessions"]
    for s in sessions:
        names += [keys.inbox_counter(s.session_id), keys.seq_counter(s.session_id),
                  keys.runs_counter(s.session_id)]
        names += [keys.pair_counter(s.session_id, r.session_id) for r in sessions]
        for label in LABELS:
            names.append(grant_counter(GrantScope.SESSION, s.session_id, label))
            names.append(grant_counter(GrantScope.TREE, s.root_session_id, label))
            names += [
                grant_counter(GrantScope.ONCE, f"{c.session_id}/{c.run_id}/{c.tool_call_id}", label)
                for c in ctxs
            ]
    return names
