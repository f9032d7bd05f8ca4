"""The kill campaign against a real daemon (``treemail daemon``), for ``just soak``.

Each round starts a daemon on a data directory, drives it over its socket from this process
with mixed load until it has answered a random 20 to 160 requests, and SIGKILLs it while
requests are in flight:

* users submit and steer (queue and steer mail), plugins send mail, the tree grows by
  delegation, and running sessions call ``send_message`` through ``tool.call`` (the daemon as
  tool executor) to their parent and siblings, by handle, under tight caps
  (``max_pending_per_session`` 6, ``max_inflight_per_pair`` 2), so inbox_full and
  inflight_full refusals are part of the load;
* the scripted model holds each run in flight for a moment, so kills find runs mid-request
  and mail claimed; the runtime commits in groups, so kills land inside group-commit batches;
* hostile peers share the daemon with them (``Hostile``): clients that subscribe to the whole
  feed and stop reading, a client that pipelines bursts of list requests, and TCP peers that
  never authenticate. The daemon's peak RSS stays under ``RSS_BOUND``, every request of the
  pipelining client is answered, and the honest client is served while they are connected.

A message counts as acknowledged once its answer (a ``message_id``) reached this process.
After every kill, with no daemon alive, the store is checked from this process by
``harness.check_store`` (logs whole, every acknowledged message stored, counters equal to a
recount from the log and within the caps, nothing consumed twice); every few kills, and at
each store's end, recovery plus a drain must consume every message exactly once. Every
request the daemon answered with an error must carry a stable treemail code; an internal
error (``rpc:internal``) fails the campaign.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import time
from pathlib import Path
from typing import Any

import msgspec

from tests.crash.harness import Tally, check_store, drain_and_verify, opened, snapshot
from tests.daemon.conftest import DaemonProcess
from tests.daemon.test_scenario import LEAD
from tests.daemon.test_scenario import WORKER as SCENARIO_WORKER
from treemail.adapters.daemon.client import Call, DaemonClient, RpcFailure
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.adapters.ui.console import Ticker
from treemail.core.config import MessagingConfig
from treemail.protocol import types as t
from treemail.protocol.methods import (
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    INITIALIZE,
    MESSAGE_LIST,
    PLUGIN_PRODUCER_SEND,
    RUN_STEER,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_DELEGATE,
    SESSION_LIST,
    TOOL_CALL,
)
from treemail.protocol.rpc_errors import InternalError

__all__ = ["LIMITS", "run_daemon_campaign"]

LIMITS = MessagingConfig(max_pending_per_session=6, max_inflight_per_pair=2)
CONFIG_TOML = f"""[messaging]
max_pending_per_session = {LIMITS.max_pending_per_session}
max_inflight_per_pair = {LIMITS.max_inflight_per_pair}

[daemon.scripted]
delay = 0.04
"""
# The scenario's worker, with siblings allowed outright (no approval holds the soak up).
WORKER = SCENARIO_WORKER.replace("sibling: ask", "sibling: allow")
assert "sibling: allow" in WORKER
# How much a daemon serves before its kill, in requests answered: progress, not wall time, so
# a loaded machine slows a round down instead of thinning it out (a clock-timed kill under a
# CPU hog found rounds too short to fill a pair window). About 150-600 ms of an idle machine.
ANSWERS_BEFORE_KILL = (20, 160)
ANSWER_TIMEOUT = 120.0  # a daemon that answers nothing for this long is stuck, not slow
RSS_BOUND = 256 << 20  # the daemon's peak resident memory, whatever the hostile peers do
STALLED = 2  # subscribers that stop reading
BURST = 32  # requests per pipelined burst
LANES = 4  # concurrent request loops, so several requests are in flight at the kill
MAX_SESSIONS = 8


def run_daemon_campaign(base: Path, kills: int, *, per_store: int, drain_every: int,
                        seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally(drain_every=drain_every)
    started = time.monotonic()
    acked: dict[str, set[str]] = {}
    tick = Ticker(kills, "daemon SIGKILLs")  # on the controlling terminal only
    for kill in range(kills):
        data = base / f"data{kill // per_store}"
        prepare(data)
        sent = acked.setdefault(str(data), set())
        daemon = DaemonProcess(data, "--tcp", f"127.0.0.1:{_free_port()}")
        asyncio.run(Load(daemon, random.Random(rng.random()), sent, tally).drive(
            rng.randint(*ANSWERS_BEFORE_KILL)))
        tally.kills += 1
        last_of_store = (kill + 1) % per_store == 0 or kill + 1 == kills
        with opened(data / "store", tally, LIMITS) as engine:
            assert isinstance(engine.store, LmdbStore)
            shot = snapshot(engine.store)
            lost = sent - set(shot.messages)
            assert not lost, f"acknowledged but not stored after kill {kill}: {sorted(lost)}"
            check_store(engine, shot, tally)
            tally.acks[str(data)] = len(sent)
            if last_of_store or (kill + 1) % drain_every == 0:
                drain_and_verify(engine, tally)
        tick(f"store {kill // per_store}")
    tick.close()
    tally.seconds = time.monotonic() - started
    return tally


def prepare(data: Path) -> None:
    if (data / "config.toml").exists():
        return
    (data / "agents").mkdir(parents=True)
    (data / "agents" / "lead.md").write_text(LEAD)
    (data / "agents" / "worker.md").write_text(WORKER)
    (data / "config.toml").write_text(CONFIG_TOML)


class Load:
    """One round of traffic against one daemon, ended by its SIGKILL."""

    def __init__(self, daemon: DaemonProcess, rng: random.Random, acked: set[str],
                 tally: Tally) -> None:
        self.daemon = daemon
        self.rng = rng
        self.acked = acked
        self.tally = tally
        self.calls = 0
        self.answered = 0  # requests of the lanes answered, a success or a refusal
        self.enough = asyncio.Event()  # set once ``answered`` reaches the round's count
        self.wanted = 0
        self.round = f"{rng.getrandbits(32):08x}"  # tool-call ids unique across rounds
        self.sessions: list[t.SessionView] = []

    async def drive(self, answers: int) -> None:
        client = await self.daemon.client()
        hostile = Hostile(self.daemon)
        try:
            await self.tree(client)
            await hostile.connect()
            async with asyncio.timeout(30):  # served, with the hostile peers connected
                await client.request(SESSION_LIST, t.SessionListParams())
            self.wanted = answers
            lanes = [asyncio.create_task(self.lane(client)) for _ in range(LANES)]
            lanes.append(asyncio.create_task(hostile.pipeline(self.tally)))
            await self.progress(lanes)
            peak = _vm(self.daemon.proc.pid, "VmHWM")
            os.kill(self.daemon.proc.pid, signal.SIGKILL)
            await asyncio.gather(*lanes)
        finally:
            hostile.close()
            await client.close()
            self.daemon.kill()
        assert self.daemon.proc.returncode == -signal.SIGKILL, self.daemon.proc.returncode
        assert peak < RSS_BOUND, f"daemon peak RSS {peak >> 20} MiB"

    async def progress(self, lanes: list[asyncio.Task[None]]) -> None:
        """Until the lanes have had ``wanted`` answers; a lane that fails first fails this."""
        waiting = asyncio.create_task(self.enough.wait())
        done, _ = await asyncio.wait([waiting, *lanes], timeout=ANSWER_TIMEOUT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            waiting.cancel()
            for lane in done:
                lane.result()  # a lane's own failure, raised here
            raise AssertionError(f"the daemon answered {self.answered} of {self.wanted} "
                                 f"requests in {ANSWER_TIMEOUT:.0f} s")

    async def tree(self, client: DaemonClient) -> None:
        listed = await client.every(SESSION_LIST, t.SessionListParams())
        if not listed:
            listed = [await client.request(SESSION_CREATE, t.SessionCreateParams(agent="lead"))]
        self.sessions = listed

    async def lane(self, client: DaemonClient) -> None:
        """Requests until the daemon dies under them."""
        try:
            while True:
                await self.step(client)
        except ConnectionError:
            self.tally.cut_requests += 1  # its request was in flight when the daemon died

    async def step(self, client: DaemonClient) -> None:
        session = self.rng.choice(self.sessions)
        sid, roll = session.session_id, self.rng.random()
        self.calls += 1
        try:
            if roll < 0.1 and len(self.sessions) < MAX_SESSIONS:
                parent = self.sessions[0].session_id
                self.sessions.append(await client.request(
                    SESSION_DELEGATE, t.SessionDelegateParams(
                        parent_session_id=parent, agent="worker", task=f"part {self.calls}")))
            elif roll < 0.3:
                self.ack(await client.request(
                    RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text=f"turn {self.calls}")))
            elif roll < 0.4:
                self.ack(await client.request(
                    RUN_STEER, t.RunSteerParams(session_id=sid, text=f"steer {self.calls}")))
            elif roll < 0.5:
                self.ack(await client.request(PLUGIN_PRODUCER_SEND, t.ProducerSendParams(
                    session_id=sid, body=f"plugin {self.calls}")))
            elif not await self.send(client, sid):
                return  # no peer to write to yet: nothing was asked
        except RpcFailure as refused:
            assert refused.data_code not in (None, InternalError.code), refused
        self.answered += 1
        if self.answered >= self.wanted:
            self.enough.set()

    async def send(self, client: DaemonClient, sid: str) -> bool:
        """A ``send_message`` call to a random peer, if there is one."""
        peers = [s for s in self.sessions if s.session_id != sid]
        if not peers:
            return False
        peer = self.rng.choice(peers)
        answer = await client.request(TOOL_CALL, t.ToolCallParams(
            session_id=sid, tool_call_id=f"soak-{self.round}-{self.calls}",
            name="send_message", arguments={
                "to": peer.handle or peer.session_id, "body": f"note {self.calls}",
                "mode": self.rng.choice(("steer", "queue"))}))
        if answer.accepted is not None:  # the send's mail, read back by the daemon
            self.ack(answer.accepted)
        return True

    def ack(self, answer: t.ProducerAccepted) -> None:
        self.acked.add(answer.message_id)


class Hostile:
    """The peers that push on the daemon's bounds during a round."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.writers: list[asyncio.StreamWriter] = []
        self.pipelined: DaemonClient | None = None

    async def connect(self) -> None:
        for n in range(STALLED):  # subscribed to the whole feed, then never read again
            _, writer = await asyncio.open_unix_connection(str(self.daemon.socket),
                                                           limit=4096)
            self.writers.append(writer)
            writer.write(b"".join(json.dumps({"jsonrpc": "2.0", "id": id, "method": method,
                                              "params": params}).encode() + b"\n"
                                  for id, method, params in (
                                      (1, INITIALIZE.name, {"protocol_version": 19,
                                                         "client_info": {"name": f"s{n}"}}),
                                      (2, EVENTS_SUBSCRIBE.name, {"after": 0}))))
        argv = self.daemon.proc.args
        assert isinstance(argv, list), argv  # DaemonProcess starts it from an argument list
        address = next(a for a in argv if str(a).startswith("127.0.0.1:"))
        host, port = str(address).split(":")
        for _ in range(2):  # unauthenticated: one silent, one that never says initialize
            _, writer = await _open_tcp(host, int(port))
            self.writers.append(writer)
        self.writers[-1].write(b'{"jsonrpc": "2.0", "id": 1, "method": "session.list"}\n')
        self.pipelined = await self.daemon.client()

    async def pipeline(self, tally: Tally) -> None:
        """Bursts of list requests in one write each; every one must be answered."""
        assert self.pipelined is not None
        try:
            while True:
                listed = (await self.pipelined.request(SESSION_LIST, t.SessionListParams(
                    ))).sessions
                calls: list[Call[Any, Any]] = [
                    Call(MESSAGE_LIST, t.MessageListParams(session_id=s.session_id))
                    for s in listed]
                calls += [Call(EVENTS_READ, t.EventsReadParams(after=0, limit=256))] * BURST
                for answer in await self.pipelined.pipeline(calls[:BURST]):
                    if isinstance(answer, ConnectionError):
                        raise answer
                    assert isinstance(answer, msgspec.Struct) or (
                        isinstance(answer, RpcFailure)
                        and answer.data_code not in (None, InternalError.code)), answer
        except ConnectionError:
            tally.cut_requests += 1

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.pipelined is not None:
            self.pipelined.writer.close()


async def _open_tcp(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The TCP listener is bound just after the socket: retry until it is."""
    async with asyncio.timeout(10):
        while True:
            try:
                return await asyncio.open_connection(host, port, limit=4096)
            except ConnectionRefusedError:
                await asyncio.sleep(0.01)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _vm(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)
