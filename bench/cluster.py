"""(n): PostgreSQL under concurrency, on one throwaway durable server started for the run.

* ``n_senders``: 32 concurrent senders through the runtime's writer (group commit) on a
  PostgreSQL store, sends per second, against a bare queue on the same server: 32 threads,
  each on its own connection, one ``INSERT`` per transaction (the least a durable send to a
  PostgreSQL queue costs, with no guard, index or feed);
* ``n_trees``: 32 concurrent senders as a daemon runs them (the store shared, its writer in
  one lane per write connection), each in a tree of its own, against the same bare queue:
  what several connections committing at once give when the senders share no tree (the
  32 senders of ``n_senders`` share one tree, whose writes one lane runs in order);
* ``n_daemons``: ``run.submit`` acknowledged per second by two daemons sharing one database
  (four trees, two each, every client on its tree's owner) against one daemon serving the
  same four trees alone: what a second daemon adds on the same server.

Without the server's binaries or psycopg, the lines are left out and say why.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.lines import Line, Scale
from bench.rigs import BODY, SPEC, UNLIMITED, Crowd, durable_postgres, released_together, run_async

if TYPE_CHECKING:
    from treemail.adapters.daemon.client import DaemonClient

__all__ = ["cluster_lines"]

SENDERS = 32
TREES = 4


def cluster_lines(root: Path, scale: Scale) -> list[Line]:
    with durable_postgres("n") as server:
        if server is None:
            return []
        return [_senders(server, scale), _trees(server, scale), _daemons(server, root, scale)]


def _medians(server: Any, crowd: Crowd | _TreeCrowd, scale: Scale) -> tuple[float, float]:
    """The median of three rounds of the crowd's sends/s and of the bare queue's, each round
    measuring both, so that a noisy neighbour hits both alike."""
    each = max(scale.per_sender // 10, 5)
    ours, bare = [], []
    for _ in range(3):
        ours.append(run_async(crowd.sends_per_second(each)))
        bare.append(_bare_queue(server.url(schema="bare_queue"), SENDERS, each))
    return sorted(ours)[1], sorted(bare)[1]


def _senders(server: Any, scale: Scale) -> Line:
    from treemail import open_store

    crowd = Crowd(open_store(server.url(), sync=True), SENDERS)
    run_async(crowd.setup())
    rate, base = _medians(server, crowd, scale)
    crowd.close()
    return Line("n_senders", f"(n) 32 concurrent senders, PostgreSQL, sends/s "
                f"({crowd.batch:.0f}/commit)", rate, base, "/s",
                "bare INSERT-per-txn queue, 32 threads, same server", "-", None)


def _trees(server: Any, scale: Scale) -> Line:
    from treemail.adapters.store.factory import open_store
    from treemail.adapters.store.leases import leases_of

    store = open_store(server.url(schema="trees"), sync=True, shared=True)
    leases = leases_of(store)
    assert leases is not None
    leases.join("bench", 3600.0)  # a member leases the trees it creates
    crowd = _TreeCrowd(store, SENDERS)
    run_async(crowd.setup())
    rate, base = _medians(server, crowd, scale)
    crowd.runtime.writer.close()
    leases.leave()
    store.close()
    return Line("n_trees", f"(n) 32 senders in 32 trees, shared PostgreSQL store, sends/s "
                f"({crowd.batch:.0f}/commit)", rate, base, "/s",
                "bare INSERT-per-txn queue, 32 threads, same server", "-", None)


class _TreeCrowd:
    """``senders`` running sessions, each sending to the root of a tree of its own, through
    the runtime's writer (one lane per write connection of the store)."""

    def __init__(self, store: Any, senders: int) -> None:
        from treemail.adapters.runtime.llm import ScriptedModel
        from treemail.adapters.runtime.runtime import Agent, Runtime
        from treemail.core.ids import CountingIds

        self.runtime = Runtime(store, CountingIds(), {SPEC.name: Agent(SPEC, ScriptedModel([]))},
                               UNLIMITED)
        self.senders = senders
        self.batch = 0.0
        self.calls = 0
        self.contexts: list[tuple[str, str, str]] = []

    async def setup(self) -> None:
        from treemail.core.records import Owner

        rt, engine = self.runtime, self.runtime.engine
        for n in range(self.senders):
            root = await rt.writer(engine.create_root, SPEC)
            await rt.writer(engine.accept, root.session_id, "go", Owner.USER)
            await rt.writer(engine.start_run, root.session_id)
            child = await rt.writer(engine.delegate, root.session_id, SPEC, f"t{n}")
            run = await rt.writer(engine.start_run, child.session_id)
            self.contexts.append((child.session_id, run.run_id, root.session_id))

    async def _sender(self, index: int, count: int) -> None:
        from treemail.core.records import ToolContext

        rt = self.runtime
        session_id, run_id, root = self.contexts[index]
        for _ in range(count):
            self.calls += 1
            ctx = ToolContext(session_id, run_id, f"s{index}-{self.calls}")
            await rt.writer(rt.engine.send_message, ctx, {"to": root, "body": BODY})

    async def sends_per_second(self, per_sender: int) -> float:
        batches = self.runtime.writer.batches
        start = time.perf_counter()
        await asyncio.gather(*(self._sender(i, per_sender) for i in range(self.senders)))
        elapsed = time.perf_counter() - start
        self.batch = self.senders * per_sender / max(self.runtime.writer.batches - batches, 1)
        return self.senders * per_sender / elapsed


def _bare_queue(url: str, threads: int, each: int) -> float:
    """Inserts per second of ``threads`` threads, each committing one INSERT at a time."""
    import psycopg

    from treemail.adapters.store.postgres_store import split_url

    conninfo, _ = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bare_queue (id bigserial PRIMARY KEY, "
                     "body text NOT NULL)")
    conns = [psycopg.connect(conninfo) for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def put(conn: psycopg.Connection[Any]) -> None:
        start.wait()
        for _ in range(each):
            conn.execute("INSERT INTO bare_queue (body) VALUES (%s)", ("hello " * 8,))
            conn.commit()

    workers = [threading.Thread(target=put, args=(c,)) for c in conns]
    elapsed = released_together(workers, start)
    for conn in conns:
        conn.close()
    return threads * each / elapsed


def _daemons(server: Any, root: Path, scale: Scale) -> Line:
    sends = max(scale.per_sender // 5, 20)  # per tree
    two = _daemon_rate(server.url(), root / "m-two", 2, sends)
    one = _daemon_rate(server.url(), root / "m-one", 1, sends)
    return Line("n_daemons", "(n) run.submit acks/s, 2 daemons on one PostgreSQL database",
                two, one, "/s", "1 daemon serving the same 4 trees", "-", None)


def _daemon_rate(url: str, root: Path, daemons: int, sends: int) -> float:
    """Acknowledged ``run.submit`` per second over ``TREES`` trees, each tree's client on
    its owner, every tree sending at once."""
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for n in range(daemons):
            data = root / f"d{n}"
            data.mkdir(parents=True, mode=0o700)
            (data / "config.toml").write_text('[daemon]\nmodel = "echo"\n')
            procs.append((subprocess.Popen(
                [sys.executable, "-m", "treemail", "daemon", "--data-dir", str(data),
                 "--store", url], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                data / "daemon.sock"))
        return asyncio.run(_submit_all([socket for _, socket in procs], sends))
    finally:
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


async def _connect(socket: Path) -> Any:
    from treemail.adapters.daemon.client import DaemonClient

    deadline = time.monotonic() + 60
    while True:
        try:
            return await DaemonClient.connect(socket, name="bench", token=None)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _submit_all(sockets: list[Path], sends: int) -> float:
    from treemail.protocol.methods import RUN_SUBMIT, SESSION_CREATE
    from treemail.protocol.types import RunSubmitParams, SessionCreateParams

    clients = [await _connect(socket) for socket in sockets]
    try:
        trees: list[tuple[DaemonClient, str]] = []
        for n in range(TREES):  # placement spreads them: two and two with two daemons
            view = await clients[n % len(clients)].request(
                SESSION_CREATE, SessionCreateParams(agent="default"))
            tree = view.session_id
            trees.append((await _owner(clients, tree), tree))

        async def send(client: DaemonClient, tree: str) -> None:
            for n in range(sends):
                await client.request(RUN_SUBMIT, RunSubmitParams(session_id=tree,
                                                                 text=f"mail {n}"),
                                     follow=False)

        began = time.perf_counter()
        await asyncio.gather(*(send(client, tree) for client, tree in trees))
        return TREES * sends / (time.perf_counter() - began)
    finally:
        for client in clients:
            await client.close()


async def _owner(clients: list[DaemonClient], tree: str) -> DaemonClient:
    """The client of the daemon that owns ``tree``: the one that accepts a write to it."""
    from treemail.adapters.daemon.client import RpcFailure
    from treemail.protocol.methods import RUN_SUBMIT
    from treemail.protocol.types import RunSubmitParams

    for client in clients:
        try:
            await client.request(RUN_SUBMIT, RunSubmitParams(session_id=tree, text="hello"),
                                 follow=False)
            return client
        except RpcFailure:  # daemon:not_owner: another one owns it
            continue
    raise RuntimeError(f"no daemon owns {tree}")
