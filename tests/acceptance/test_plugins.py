"""Plugins: a feed observer sees every durable event once, in order, live; a tool gate can
refuse a send with its own code; plugin mail never counts against the agent inbox cap;
loading from entry points and ``module:attr`` specs fails with errors that name the spec."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from tests.acceptance.conftest import (
    Brain,
    Messages,
    Recorder,
    accepted_bodies,
    agent,
    delegate,
    on_user,
    open_store,
    reply,
    results,
    run,
    runtime,
    send,
    turns,
    until,
)
from treemail.adapters.runtime import plugins as plugin_module
from treemail.adapters.runtime.llm import ModelReply, ToolCall
from treemail.adapters.runtime.plugins import (
    PluginHandle,
    PluginLoadError,
    PluginRefusal,
    load_plugins,
    load_spec,
    replay,
)
from treemail.core.config import MessagingConfig
from treemail.core.envelope import render_envelope
from treemail.core.errors import InboxFull, PluginBodyTooLarge
from treemail.core.events import EventKind
from treemail.core.lifecycle import SessionState
from treemail.core.records import Event, Session

LEAD_RULES = {"child": "allow"}


class AsyncRecorder(Recorder):
    async def on_event(self, number: int, event: Event) -> None:  # type: ignore[override]
        self.seen.append((number, event))


class NoSecrets:
    """Audits every tool call and refuses sends that mention a secret."""

    def __init__(self) -> None:
        self.audit: list[str] = []

    async def tool_before_call(self, session: Session, call: ToolCall) -> None:
        self.audit.append(f"{session.agent.name}:{call.name}")
        if call.name == "send_message" and "secret" in str(call.arguments):
            raise PluginRefusal("messages may not carry secrets; send a reference instead")


class Injector:
    def __init__(self) -> None:
        self.handle: PluginHandle | None = None

    def attach(self, handle: PluginHandle) -> None:
        self.handle = handle


def test_an_observer_sees_every_feed_event_once_in_order(tmp_path: Path) -> None:
    ids: dict[str, str] = {}
    lead = Brain(on_user({"go": lambda: reply(send(ids["child"], "more"))}))
    worker = Brain(lambda m: ModelReply(text="done"))
    live, awaited = Recorder(), AsyncRecorder()

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", LEAD_RULES, lead),
                             "worker": agent("worker", {"parent": "allow"}, worker)},
                     plugins=[live, awaited])
        await rt.start()
        root = await rt.create_root("lead")
        ids["child"] = (await delegate(rt, root, "worker", "map it")).session_id
        await rt.accept(root.session_id, "go")
        await rt.quiesce()
        stored = rt.engine.feed()
        assert live.seen == stored and awaited.seen == stored  # caught up at quiesce
        await rt.shutdown()  # interrupts nothing here, but the flush still runs
        assert live.seen == rt.engine.feed()
        numbers = [n for n, _ in live.seen]
        assert numbers == list(range(1, len(numbers) + 1))  # every event, once, in order
        assert {EventKind.PRODUCER_MESSAGE_ACCEPTED, EventKind.PRODUCER_MESSAGE_CONSUMED} <= {
            e.kind for _, e in live.seen}
        again = Recorder()
        assert await replay(rt.engine, again) == len(stored)
        assert again.seen == live.seen
        store.close()

    run(main)


def test_a_tool_gate_refuses_a_send_and_the_model_sees_its_code(tmp_path: Path) -> None:
    ids: dict[str, str] = {}

    def lead_respond(messages: Messages) -> ModelReply:
        if turns(messages) == 0:
            return reply(send(ids["child"], "the secret is 42"), send(ids["child"], "hi"))
        return ModelReply(text="done")

    lead, gate = Brain(lead_respond), NoSecrets()

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", LEAD_RULES, lead),
                             "worker": agent("worker", {}, Brain(lambda m: ModelReply("ok")))},
                     plugins=[gate])
        await rt.start()
        root = await rt.create_root("lead")
        ids["child"] = (await delegate(rt, root, "worker", "wait", start=False)).session_id
        await rt.accept(root.session_id, "go")
        await rt.quiesce()
        refused, sent = results(lead.requests[1][0])
        assert refused["error"] == PluginRefusal.code and "secrets" in refused["message"]
        assert "message_id" in sent
        assert accepted_bodies(rt) == ["hi"]  # the refused send left no trace
        assert gate.audit == ["lead:send_message", "lead:send_message"]
        await rt.shutdown()
        store.close()

    run(main)


def test_plugin_accept_injects_plugin_mail_outside_the_inbox_cap(tmp_path: Path) -> None:
    ids: dict[str, str] = {}
    lead = Brain(on_user({"go": lambda: reply(send(ids["child"], "one"),
                                              send(ids["child"], "two"))}))
    worker = Brain(lambda m: ModelReply(text="ok"), hold=lambda m: turns(m) == 0)
    injector = Injector()
    config = MessagingConfig(max_pending_per_session=1, max_inflight_per_pair=0)

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"lead": agent("lead", LEAD_RULES, lead),
                             "worker": agent("worker", {"parent": "allow"}, worker)},
                     config, plugins=[injector])
        await rt.start()
        assert injector.handle is not None
        root = await rt.create_root("lead")
        kid = await delegate(rt, root, "worker", "map it")
        ids["child"] = kid.session_id
        await worker.held.wait()
        await rt.accept(root.session_id, "go")
        await until(lambda: rt.engine.session(root.session_id).state == SessionState.FINISHED)
        one, two = results(lead.requests[-1][0])
        assert "message_id" in one and two["error"] == InboxFull.code
        notes = [await injector.handle.accept(kid.session_id, f"note {i}")
                 for i in range(3)]
        assert len(set(notes)) == 3  # accepted although the agent inbox is full
        worker.release.set()
        await rt.quiesce()
        envelope = render_envelope(root.reference, "one", reply_hint=True)
        assert worker.inputs(1) == [envelope, "note 0", "note 1", "note 2"]  # plain, no envelope
        assert not worker.seen("two")
        await rt.shutdown()
        store.close()

    run(main)


def test_plugins_load_from_specs_and_entry_points_with_errors_naming_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert isinstance(load_spec("tests.acceptance.conftest:Recorder"), Recorder)
    for spec, named in [("no-colon", "'no-colon'"),
                        ("tests.acceptance.conftest:Missing", "has no Missing"),
                        ("no_such_module_zz:Thing", "cannot import no_such_module_zz"),
                        ("tests.acceptance.conftest:run", "has none of the hooks")]:
        with pytest.raises(PluginLoadError, match=named) as caught:
            load_spec(spec)
        assert caught.value.code == PluginLoadError.code

    good = EntryPoint("rec", "tests.acceptance.conftest:Recorder", "treemail.plugins")
    bad = EntryPoint("broken", "no_such_module_zz:Thing", "treemail.plugins")
    monkeypatch.setattr(plugin_module, "entry_points", lambda group: [good])
    [loaded, extra] = load_plugins(["tests.acceptance.test_plugins:NoSecrets"])
    assert isinstance(loaded, Recorder) and isinstance(extra, NoSecrets)
    monkeypatch.setattr(plugin_module, "entry_points", lambda group: [good, bad])
    with pytest.raises(PluginLoadError, match="entry point broken"):
        load_plugins()


def test_an_in_process_plugin_is_held_to_the_wire_cap_and_may_key_its_mail(
    tmp_path: Path,
) -> None:
    """The 256 KiB cap is the engine's, so a plugin's handle meets it as the wire does; and
    the handle takes an idempotency key as plugin/producer/send does."""
    worker = Brain(lambda m: ModelReply(text="ok"))
    injector = Injector()

    async def main() -> None:
        store = open_store(tmp_path)
        rt = runtime(store, {"worker": agent("worker", {}, worker)}, MessagingConfig(),
                     plugins=[injector])
        await rt.start()
        assert injector.handle is not None
        root = await rt.create_root("worker")
        with pytest.raises(PluginBodyTooLarge) as caught:
            await injector.handle.accept(root.session_id, "x" * (300 * 1024))
        assert caught.value.details["limit"] == 256 * 1024
        assert rt.engine.pending(root.session_id) == []  # nothing was accepted
        first = await injector.handle.accept(root.session_id, "note", idempotency_key="n-1")
        again = await injector.handle.accept(root.session_id, "note", idempotency_key="n-1")
        assert again == first
        await rt.quiesce()
        assert worker.inputs(0) == ["note"]  # delivered once
        await rt.shutdown()
        store.close()

    run(main)
