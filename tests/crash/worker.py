"""A process that drives the engine under load on a durable LMDB store until it is killed.

Usage: ``python -m tests.crash.worker STORE_DIR SEED ACK_FILE [READY_FILE]``

It opens the store with ``sync=True``, runs ``recover()``, builds the tree if the store has
none (one root, four children), writes READY_FILE (default ``ACK_FILE.ready``) and then loops
forever: runs start, requests begin and commit or abort, runs finish or are cancelled, idle
sessions are woken with user mail, and running sessions send to their peers, by handle or by
UUID. Every choice comes from ``random.Random(SEED)``; SEED must differ per process, since
tool-call ids (``w<SEED>-<n>``) and message ids are derived from it.

Right after ``send_message`` returns success the worker appends ``message_id<TAB>session/run/
tool_call`` to ACK_FILE and fsyncs it: from then on the caller has seen the success. It also
retries earlier tool calls (its own, and those acked by earlier processes) with the same
ToolContext; a replay must return the original message_id. It logs ``replay<TAB>message_id<TAB>
context`` for each, and exits with status 3 at once if one does not match.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from treemail.adapters.runtime.ids import SeededIds
from treemail.adapters.store.group_commit import GroupStore
from treemail.adapters.store.lmdb_store import LmdbStore
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.errors import Refusal
from treemail.core.lifecycle import SessionState
from treemail.core.permissions import Rules
from treemail.core.records import AgentSpec, Owner, Session, ToolContext

# Sends succeed unless a rule denies them: no inbox or pair cap gets in the way.
CONFIG = MessagingConfig(max_pending_per_session=1_000_000, max_inflight_per_pair=0)
# The soak's load (``TREEMAIL_CRASH_CAPS=1``): tight caps, so inbox_full and inflight_full
# refusals happen too, and the check after each kill finds every cap held.
CAPPED = MessagingConfig(max_pending_per_session=6, max_inflight_per_pair=2)
ROOT = AgentSpec("lead", "delegates", Rules.of({"child": "allow"}))
PEERS = Rules.of({"parent": "allow", "sibling": "allow"})
CHILDREN = (
    AgentSpec("alpha", "explores", PEERS),
    AgentSpec("beta", "reviews", PEERS),
    AgentSpec("gamma", "tests", PEERS),
    # Siblings are denied to delta: a few refusals, which are never acked.
    AgentSpec("delta", "reports", Rules.of({"parent": "allow"})),
)
REPLAY_MISMATCH = 3
GROUP = os.environ.get("TREEMAIL_CRASH_GROUP") == "1"


def config() -> MessagingConfig:
    """The limits a worker runs under, and the checks recount against (read at call time:
    a test sets the variable its workers inherit)."""
    return CAPPED if os.environ.get("TREEMAIL_CRASH_CAPS") == "1" else CONFIG


def context_text(ctx: ToolContext) -> str:
    return f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}"


def parse_context(text: str) -> ToolContext:
    session_id, run_id, tool_call_id = text.split("/")
    return ToolContext(session_id, run_id, tool_call_id)


def complete_lines(path: Path) -> list[str]:
    """The lines of ``path`` that were written whole. A kill can cut an append short (a write
    crossing a page boundary), and such a fragment was never acknowledged."""
    if not path.exists():
        return []
    return path.read_text().split("\n")[:-1]


def drop_fragment(path: Path) -> None:
    """Cut a trailing unfinished line off ``path``, so the next append starts a line."""
    if path.exists():
        raw = path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            os.truncate(path, raw.rfind(b"\n") + 1)


def read_acks(path: Path) -> list[tuple[str, str]]:
    """The (message_id, context) acks of ``path``, ignoring replay records."""
    acks = []
    for line in complete_lines(path):
        fields = line.split("\t")
        if len(fields) == 2:
            acks.append((fields[0], fields[1]))
    return acks


class Worker:
    def __init__(self, store_dir: str, seed: int, ack_path: Path) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        store = LmdbStore.open(store_dir, sync=True)
        self.group = GroupStore(store) if GROUP else None
        self.engine = Engine(self.group or store, SeededIds(seed + (1 << 64)), config())
        # Acks of the open batch: written once it commits (never, if the kill comes first).
        self.unacked: list[tuple[str, bool]] | None = None
        self.calls = 0
        # Earlier tool calls to retry: (context, arguments, message_id the first call got).
        self.history: list[tuple[ToolContext, dict[str, str], str]] = []
        for message_id, text in read_acks(ack_path):
            ctx = parse_context(text)
            self.history.append((ctx, self.original_arguments(ctx, message_id), message_id))
        drop_fragment(ack_path)
        self.ack_fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def original_arguments(self, ctx: ToolContext, message_id: str) -> dict[str, str]:
        """A true retry repeats the call exactly (a reused id with other arguments is an
        idempotency conflict): body and mode from the stored message, and ``to`` spelt as the
        call spelt it, which its tool call id records (``-h`` handle, ``-u`` session id)."""
        message = self.engine.message(message_id)
        recipient = self.engine.session(message.recipient)
        to = recipient.reference if ctx.tool_call_id.endswith("-h") else recipient.session_id
        return {"to": to, "body": message.body, "mode": message.mode.value}

    def setup(self) -> None:
        """Recover, then build whatever part of the tree an earlier process did not."""
        self.engine.recover()
        roots = [s for s in self.engine.sessions() if s.parent_session_id is None]
        root = roots[0] if roots else self.engine.create_root(ROOT)
        have = {s.agent.name for s in self.engine.sessions()}
        for spec in CHILDREN:
            if spec.name not in have:
                self.engine.delegate(root.session_id, spec, f"Work as {spec.name}.")

    def batch(self) -> None:
        """Steps in one group commit; their acks go out after it."""
        assert self.group is not None
        steps = self.rng.randint(1, 16)
        known = len(self.history)

        def work() -> None:
            # The store may run this again (a full map): forget the undone attempt's sends.
            del self.history[known:]
            self.unacked = []
            for _ in range(steps):
                self.step()

        self.group.batch(work)
        pending, self.unacked = self.unacked or [], None
        for line, durable in pending:
            self.ack(line, durable)

    def ack(self, line: str, durable: bool) -> None:
        if self.unacked is not None:
            self.unacked.append((line, durable))
            return
        os.write(self.ack_fd, line.encode())
        if durable:
            os.fsync(self.ack_fd)

    def step(self) -> None:
        sessions = self.engine.sessions()
        session = self.rng.choice(sessions)
        if self.history and self.rng.random() < 0.1:
            self.replay()
        elif session.state == SessionState.QUEUED:
            self.engine.start_run(session.session_id)
        elif session.state == SessionState.RUNNING:
            self.act(session, sessions)
        elif self.rng.random() < 0.3:
            self.engine.accept(session.session_id, f"user turn {self.calls}", Owner.USER)

    def act(self, session: Session, sessions: list[Session]) -> None:
        assert session.run_id is not None
        sid, run = session.session_id, self.engine.run(session.run_id)
        roll = self.rng.random()
        if roll < 0.5:
            self.send(session, run.run_id, sessions)
        elif run.open_request is not None:
            if roll < 0.85:
                self.engine.commit_request(sid, run.run_id, run.open_request)
            else:
                self.engine.abort_request(sid, run.run_id, run.open_request)
        elif roll < 0.8:
            self.engine.begin_request(sid, run.run_id)
        elif roll < 0.95:
            self.engine.finish_run(sid, run.run_id)
        else:
            self.engine.cancel_run(sid, run.run_id)

    def send(self, session: Session, run_id: str, sessions: list[Session]) -> None:
        peers = [s for s in sessions if s.session_id != session.session_id]
        peer = self.rng.choice(peers)
        by_handle = self.rng.random() < 0.7
        to = peer.reference if by_handle else peer.session_id
        self.calls += 1
        spelling = "h" if by_handle else "u"
        ctx = ToolContext(session.session_id, run_id, f"w{self.seed}-{self.calls}-{spelling}")
        arguments = {"to": to, "body": f"note {self.calls} from {session.reference}",
                     "mode": self.rng.choice(("steer", "queue"))}
        try:
            result = self.engine.send_message(ctx, arguments)
        except Refusal:
            return
        self.ack(f"{result.message_id}\t{context_text(ctx)}\n", durable=True)
        self.history.append((ctx, arguments, result.message_id))

    def replay(self) -> None:
        ctx, arguments, message_id = self.rng.choice(self.history)
        result = self.engine.send_message(ctx, arguments)
        self.ack(f"replay\t{result.message_id}\t{context_text(ctx)}\n", durable=False)
        if result.message_id != message_id:
            print(f"replay of {context_text(ctx)} returned {result.message_id}, "
                  f"not {message_id}", file=sys.stderr, flush=True)
            os._exit(REPLAY_MISMATCH)


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    ack_path = Path(argv[3])
    ready = Path(argv[4]) if len(argv) == 5 else Path(f"{ack_path}.ready")
    worker = Worker(argv[1], int(argv[2]), ack_path)
    worker.setup()
    ready.write_text(f"{os.getpid()}\n")
    while True:
        if GROUP:
            worker.batch()
        else:
            worker.step()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
