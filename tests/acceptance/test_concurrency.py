"""Many agents sending at once through one runtime: none lost, none duplicated, every cap held.

Phase one: 50 sibling agents each send 100 messages to the others at once, with caps too
large to bite; every accepted message must be consumed exactly once (counted on the feed).
Phase two: small caps and a slow hub that many senders target, so inbox_full and
inflight_full refusals really happen; senders retry until their quota is accepted, and an
observer replays the feed to check that no pending count ever went past its cap.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from tests.acceptance.conftest import (
    Brain,
    Messages,
    agent,
    delegate,
    feed_kinds,
    open_store,
    reply,
    results,
    run,
    runtime,
    send,
)
from treemail.adapters.runtime.llm import ModelReply
from treemail.core.config import MessagingConfig
from treemail.core.errors import InboxFull, InflightFull
from treemail.core.events import EventKind
from treemail.core.records import Event

AGENTS, EACH, BATCH = 50, 100, 10
SENDERS, QUOTA, BURST = 12, 20, 4
SMALL = MessagingConfig(max_pending_per_session=8, max_inflight_per_pair=2)


def _sent(messages: Messages) -> int:
    return sum(1 for r in results(messages) if "message_id" in r)


def _attempted(messages: Messages) -> int:
    return sum(1 for m in messages if m["role"] == "assistant" for _ in m.get("tool_calls", ()))


class CapWatch:
    """Rebuilds pending agent mail per recipient and per pair from the live feed."""

    def __init__(self) -> None:
        self.inbox: Counter[str] = Counter()
        self.pair: Counter[tuple[str, str]] = Counter()
        self.peak_inbox = self.peak_pair = 0
        self.senders: dict[str, str] = {}

    def on_event(self, number: int, event: Event) -> None:
        data = event.data
        if data.get("owner") != "agent":
            return
        key = (str(data.get("sender")), event.session_id)
        if event.kind == EventKind.PRODUCER_MESSAGE_ACCEPTED:
            self.inbox[event.session_id] += 1
            self.pair[key] += 1
            self.peak_inbox = max(self.peak_inbox, self.inbox[event.session_id])
            self.peak_pair = max(self.peak_pair, self.pair[key])
        elif event.kind in (EventKind.PRODUCER_MESSAGE_CONSUMED,
                            EventKind.PRODUCER_MESSAGE_DISCARDED):
            self.inbox[event.session_id] -= 1
            self.pair[key] -= 1


def test_fifty_agents_sending_a_hundred_messages_each(tmp_path: Path) -> None:
    peers: list[str] = []

    def worker(index: int) -> Brain:
        def respond(messages: Messages) -> ModelReply:
            done = _attempted(messages)
            if done >= EACH:
                return ModelReply(text="done")
            return reply(*(send(peers[(index + 1 + k % (AGENTS - 1)) % AGENTS], f"w{index}#{k}")
                           for k in range(done, done + BATCH)))

        return Brain(respond)

    big = MessagingConfig(max_pending_per_session=AGENTS * EACH, max_inflight_per_pair=0)
    brains = [worker(i) for i in range(AGENTS)]

    async def main() -> None:
        store = open_store(tmp_path)
        agents = {f"w{i}": agent(f"w{i}", {"*": "allow"}, brains[i]) for i in range(AGENTS)}
        agents["boss"] = agent("boss", None, Brain(lambda m: ModelReply(text="ok")))
        rt = runtime(store, agents, big)
        await rt.start()
        boss = await rt.create_root("boss")
        children = [await delegate(rt, boss, f"w{i}", "send", start=False)
                    for i in range(AGENTS)]
        peers.extend(c.session_id for c in children)
        began = time.perf_counter()
        for child in children:  # all at once
            rt.poke(child.session_id)
        await rt.quiesce(60)
        elapsed = time.perf_counter() - began

        accepted = feed_kinds(rt, EventKind.PRODUCER_MESSAGE_ACCEPTED)
        consumed = feed_kinds(rt, EventKind.PRODUCER_MESSAGE_CONSUMED)
        assert len(accepted) == AGENTS * EACH and set(accepted.values()) == {1}
        assert consumed == accepted  # each accepted message consumed exactly once
        assert not feed_kinds(rt, EventKind.PRODUCER_MESSAGE_DISCARDED)
        sent = [r for b in brains for r in results(b.requests[-1][0])]
        assert len(sent) == AGENTS * EACH and all("message_id" in r for r in sent)
        print(f"\n{AGENTS * EACH} messages among {AGENTS} agents in {elapsed:.2f}s")
        await rt.shutdown()
        store.close()

    run(main, timeout=90)


def test_small_caps_refuse_and_never_overflow(tmp_path: Path) -> None:
    hub_id: list[str] = []

    def sender(messages: Messages) -> ModelReply:
        done = _sent(messages)
        if done >= QUOTA:
            return ModelReply(text="done")
        return reply(*(send(hub_id[0], "ping") for _ in range(min(BURST, QUOTA - done))))

    async def back_off(messages: Messages) -> None:
        latest = results(messages)[-BURST:]
        if latest and all("error" in r for r in latest):
            await asyncio.sleep(0.002)  # all refused: give the hub time to read

    async def slow(messages: Messages) -> None:
        await asyncio.sleep(0.003)

    watch = CapWatch()
    senders = [Brain(sender, pause=back_off) for _ in range(SENDERS)]

    async def main() -> None:
        store = open_store(tmp_path)
        agents = {f"s{i}": agent(f"s{i}", {"sibling": "allow"}, senders[i])
                  for i in range(SENDERS)}
        agents["hub"] = agent("hub", None, Brain(lambda m: ModelReply(text="read"), pause=slow))
        agents["boss"] = agent("boss", None, Brain(lambda m: ModelReply(text="ok")))
        rt = runtime(store, agents, SMALL, plugins=[watch])
        await rt.start()
        boss = await rt.create_root("boss")
        hub = await delegate(rt, boss, "hub", "read your mail")
        hub_id.append(hub.session_id)
        for i in range(SENDERS):
            await delegate(rt, boss, f"s{i}", "ping the hub")
        await rt.quiesce(60)

        accepted = feed_kinds(rt, EventKind.PRODUCER_MESSAGE_ACCEPTED)
        assert len(accepted) == SENDERS * QUOTA
        refusals = Counter(str(r["error"]) for b in senders
                           for r in results(b.requests[-1][0]) if "error" in r)
        assert feed_kinds(rt, EventKind.PRODUCER_MESSAGE_CONSUMED) == accepted
        assert refusals[InboxFull.code] > 0
        assert refusals[InflightFull.code] > 0
        assert watch.peak_inbox == SMALL.max_pending_per_session  # reached, never passed
        assert 0 < watch.peak_pair <= SMALL.max_inflight_per_pair
        assert sum(watch.inbox.values()) == 0 and sum(watch.pair.values()) == 0
        print(f"\n{len(accepted)} accepted with small caps; refusals {dict(refusals)}")
        await rt.shutdown()
        store.close()

    run(main, timeout=90)
