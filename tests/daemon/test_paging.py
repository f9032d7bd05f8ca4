"""The list methods answer in bounded pages, against a real daemon subprocess: a cursor
walks every item once, in order, whatever is added meanwhile; the last page says it is the
last; ``limit`` is bounded by the wire type; a page of mail stops at about 1 MiB of bodies.
And ``treemail tail`` names new sessions from their events: showing N new sessions costs no
call per session (it used to list every session for each one)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from tests.daemon.conftest import DaemonProcess, run
from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.ui.commands import follow
from treemail.adapters.ui.transcript import Row
from treemail.core.errors import UnknownTarget
from treemail.core.lifecycle import MessageState
from treemail.protocol import types as t
from treemail.protocol.methods import (
    EVENTS_READ,
    EVENTS_SUBSCRIBE,
    INITIALIZE,
    MESSAGE_GET,
    MESSAGE_LIST,
    RUN_LIST,
    RUN_SUBMIT,
    SESSION_CREATE,
    SESSION_DELEGATE,
    SESSION_GET,
    SESSION_LIST,
    Paged,
)
from treemail.protocol.rpc_errors import InvalidParams
from treemail.protocol.types import PAGE_BODY_BYTES, PAGE_LIMIT

P = TypeVar("P", bound=msgspec.Struct)
Item = TypeVar("Item", bound=msgspec.Struct)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[DaemonProcess]:
    """A daemon of this test alone, so it knows every session there is."""
    process = DaemonProcess(tmp_path / "data")
    yield process
    code, err = process.terminate()
    assert code == 0, err


async def _walk(client: DaemonClient, method: Paged[P, Any, Item], params: P,
                limit: int) -> list[list[Item]]:
    limited = msgspec.structs.replace(params, limit=limit)
    return [page async for page in client.pages(method, limited)]


def test_session_pages_walk_every_session_once_in_creation_order(
    fresh: DaemonProcess,
) -> None:
    async def go() -> None:
        client = await fresh.client()
        try:
            made = [(await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
                    for _ in range(5)]
            pages = await _walk(client, SESSION_LIST, t.SessionListParams(), 2)
            assert [len(p) for p in pages] == [2, 2, 1]
            assert [s.session_id for p in pages for s in p] == made
            # Exactly one page's worth: that page is the last, and says so.
            whole = await client.request(SESSION_LIST, t.SessionListParams(limit=5))
            assert len(whole.sessions) == 5 and whole.next is None
            first = await client.request(SESSION_LIST, t.SessionListParams(limit=4))
            assert first.next is not None
            # A session created between pages lands after every cursor given out.
            late = (await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
            rest = await client.request(
                SESSION_LIST, t.SessionListParams(after=first.next, limit=4))
            assert [s.session_id for s in rest.sessions] == [made[4], late]
            assert rest.next is None
        finally:
            await client.close()

    run(go())


def test_a_trees_sessions_page_too_and_an_unknown_tree_is_an_error(
    daemon: DaemonProcess,
) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            lead = (await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
            kids = [(await client.request(SESSION_DELEGATE, t.SessionDelegateParams(
                parent_session_id=lead, agent="default", task=f"part {i}"))).session_id
                    for i in range(3)]
            await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))  # another tree
            pages = await _walk(client, SESSION_LIST, t.SessionListParams(root_session_id=lead), 3)
            assert [[s.session_id for s in p] for p in pages] == [[lead, *kids[:2]],
                                                                     [kids[2]]]
            with pytest.raises(RpcFailure) as unknown:
                await client.request(SESSION_LIST, t.SessionListParams(
                    root_session_id="00000000-0000-4000-8000-000000000000"))
            assert unknown.value.data_code == UnknownTarget.code
        finally:
            await client.close()

    run(go())


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": PAGE_LIMIT + 1}, {"after": -1}])
def test_limit_and_cursor_are_bounded_by_the_wire_type(
    daemon: DaemonProcess, params: dict[str, int],
) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            for method in (SESSION_LIST.name, MESSAGE_LIST.name, RUN_LIST.name):
                extra = {} if method == SESSION_LIST.name else {
                    "session_id": "00000000-0000-4000-8000-000000000000"}
                with pytest.raises(RpcFailure) as bad:  # out of range: not a typed request
                    await client.call_raw(method, {**extra, **params})
                assert bad.value.data_code == InvalidParams.code, method
        finally:
            await client.close()

    run(go())


async def _consumed(client: DaemonClient, message_ids: list[str]) -> None:
    async with asyncio.timeout(60):
        for message_id in message_ids:
            while (await client.request(MESSAGE_GET, t.MessageGetParams(
                    message_id=message_id))).message.state != MessageState.CONSUMED:
                await asyncio.sleep(0.02)


def test_mail_and_run_pages_walk_the_sessions_log(daemon: DaemonProcess) -> None:
    async def go() -> None:
        client = await daemon.client()
        try:
            sid = (await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
            sent = [(await client.submit(sid, f"m{i}")).message_id for i in range(5)]
            await _consumed(client, sent)
            mail = await _walk(client, MESSAGE_LIST, t.MessageListParams(session_id=sid), 2)
            assert [len(p) for p in mail] == [2, 2, 1]
            assert [m.message_id for p in mail for m in p] == sent
            runs = await _walk(client, RUN_LIST, t.RunListParams(session_id=sid), 1)
            whole = await client.request(RUN_LIST, t.RunListParams(session_id=sid))
            assert [r for p in runs for r in p] == whole.runs and whole.next is None
            assert [r.number for r in whole.runs] == list(
                range(1, len(whole.runs) + 1))
            assert await client.every(
                MESSAGE_LIST, t.MessageListParams(session_id=sid, pending_only=True)) == []
        finally:
            await client.close()

    run(go())


def test_a_page_of_mail_stops_at_about_a_megabyte_of_bodies(daemon: DaemonProcess) -> None:
    """Three bodies of 400 KiB: two fit a page's budget, the third starts the next page."""
    body = 400 << 10
    assert 2 * body <= PAGE_BODY_BYTES < 3 * body

    async def go() -> None:
        client = await daemon.client()
        try:
            sid = (await client.request(
                SESSION_CREATE, t.SessionCreateParams(agent="default"))).session_id
            sent = [(await client.request(
                RUN_SUBMIT, t.RunSubmitParams(session_id=sid, text=str(i) * body))).message_id
                    for i in range(3)]
            pages = await _walk(client, MESSAGE_LIST, t.MessageListParams(
                session_id=sid), PAGE_LIMIT)
            assert [[m.message_id for m in p] for p in pages] == [sent[:2], sent[2:]]
        finally:
            await client.close()

    run(go())


class Counting(DaemonClient):
    """A client that counts the calls it makes, by method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()

    async def call_many_raw(self, calls: list[tuple[str, Any]], *,
                            timeout: float | None = None) -> list[Any]:
        self.calls.update(method for method, _ in calls)  # every request goes through here
        return await super().call_many_raw(calls, timeout=timeout)


def _tail_calls(daemon: DaemonProcess, old: int, new: int) -> Counter[str]:
    """The calls ``treemail tail``'s loop makes while ``old`` sessions created before it
    started get mail and ``new`` sessions are created, until it has shown all of it."""
    async def go() -> Counter[str]:
        maker = await daemon.client()
        tail = await Counting.connect(daemon.socket, name="tail")
        assert isinstance(tail, Counting)  # connect is typed to return the base class
        rows: list[Row] = []
        following = asyncio.Event()

        def show(row: Row | None, number: int) -> None:
            if row is None:
                following.set()
            else:
                rows.append(row)

        try:
            before = [await maker.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
                      for _ in range(old)]
            task = asyncio.ensure_future(follow(tail, None, show))
            await asyncio.wait_for(following.wait(), 60)
            made = [await maker.request(SESSION_CREATE, t.SessionCreateParams(agent="default"))
                    for _ in range(new)]
            for session in before:
                await maker.request(RUN_SUBMIT, t.RunSubmitParams(
                    session_id=session.session_id, text="hello"))
            async with asyncio.timeout(60):
                while not ({s.handle for s in before + made}
                           <= {r.who for r in rows}):
                    await asyncio.sleep(0.02)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert all(r.who in {s.handle for s in before + made} for r in rows)
            return tail.calls
        finally:
            await tail.close()
            await maker.close()

    return run(go())


def test_tail_names_new_sessions_from_their_events(tmp_path: Path) -> None:
    """New sessions cost the tail no call at all, however many; a session it has not seen
    created costs one ``session.get``, once. So N sessions cost O(N) calls, not O(N^2)."""
    counted = []
    for name, new in (("few", 3), ("many", 30)):  # a daemon each: no other tree's events
        process = DaemonProcess(tmp_path / name)
        try:
            counted.append(_tail_calls(process, old=2, new=new))
        finally:
            code, err = process.terminate()
            assert code == 0, err
    start = Counter({INITIALIZE.name: 1, EVENTS_READ.name: 1, EVENTS_SUBSCRIBE.name: 1})
    assert [calls - start for calls in counted] == [Counter({SESSION_GET.name: 2})] * 2
