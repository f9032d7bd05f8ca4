"""Streamed chat completions (``stream = true``) against a real local server: the reply is
assembled from its events, and every way a stream goes wrong (a refusal, a cut, garbage, an
error event, no end, a stall, no end of bytes) is a typed ``ModelError`` with the HTTP status,
the endpoint and a hint, as the runtime's interruption shows them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fuzz.fake_server import FakeServer, Plan, serving, sse, streamed
from treemail.adapters.runtime.chat_stream import StreamAssembler, StreamProblem
from treemail.adapters.runtime.llm import ModelError, ModelReply, OpenAICompatibleModel, ToolCall
from treemail.core.tools import tool_definitions

MESSAGES = [{"role": "user", "content": "List the modules."}]
TOOLS = tool_definitions(["send_message"])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # 127.0.0.1 must not go through a proxy
    with serving() as fake:
        yield fake


def _complete(server: FakeServer, plans: list[Plan], **options: Any) -> ModelReply:
    server.answer_with(plans)
    model = OpenAICompatibleModel(server.base_url, "key", "m", stream=True,
                                  **{"timeout": 30.0, **options})
    return asyncio.run(model.complete(MESSAGES, TOOLS))


def _failure(server: FakeServer, plans: list[Plan], **options: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _complete(server, plans, **options)
    error = caught.value
    assert error.code == ModelError.code
    assert error.details["url"] == f"{server.base_url}/chat/completions"
    assert isinstance(error.details["hint"], str) and error.details["hint"]
    return error


def test_a_streamed_text_reply_is_assembled_and_the_request_asks_for_a_stream(
    server: FakeServer,
) -> None:
    reply = _complete(server, [Plan(mode="stream", chunks=streamed("All ", "modules", "."))])
    assert reply == ModelReply(text="All modules.")
    assert json.loads(server.requests[0])["stream"] is True


def test_streamed_tool_calls_are_assembled_from_their_pieces(server: FakeServer) -> None:
    def piece(index: int, **fields: Any) -> dict[str, Any]:
        return {"choices": [{"delta": {"tool_calls": [{"index": index, **fields}]}}]}

    chunks = sse(
        piece(0, id="call_1", type="function", function={"name": "send_message", "arguments": ""}),
        piece(0, function={"arguments": '{"to": "main_0'}),
        piece(1, id="call_2", function={"name": "send_message", "arguments": '{"to": "b"'}),
        piece(0, function={"arguments": '0000001", "body": "done"}'}),
        piece(1, function={"arguments": ', "body": "x"}'}),
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"total_tokens": 9}},  # usage-only chunk: no choice
        "[DONE]",
    )
    reply = _complete(server, [Plan(mode="stream", chunks=chunks)])
    assert reply == ModelReply(text=None, tool_calls=(
        ToolCall("call_1", "send_message", {"to": "main_00000001", "body": "done"}),
        ToolCall("call_2", "send_message", {"to": "b", "body": "x"})))


def test_a_server_that_ignores_stream_true_is_read_whole(server: FakeServer) -> None:
    assert _complete(server, [Plan()]).text == "done"


def test_a_refused_stream_reports_the_status_and_the_hint(server: FakeServer) -> None:
    error = _failure(server, [Plan(status=401, body=b'{"error": "bad key"}')])
    assert error.details["status"] == 401 and "check the API key" in error.message


def test_a_stream_cut_mid_reply_says_it_broke_off(server: FakeServer) -> None:
    error = _failure(server, [Plan(mode="cut", chunks=streamed("half a ", done=False))])
    assert error.details["status"] == 200
    assert "broke off after" in error.message and "mid-reply" in str(error.details["hint"])


def test_a_stream_that_closes_without_its_end_is_not_taken_as_the_reply(
    server: FakeServer,
) -> None:
    error = _failure(server, [Plan(mode="stream", chunks=streamed("half a ", done=False))])
    assert "without [DONE]" in error.message


@pytest.mark.parametrize(("chunks", "problem"), [
    ((b"data: {not json\n\n",), "a data line is not JSON"),
    (sse([1, 2]), "a chunk is not a JSON object"),
    (sse({"choices": "none"}), "a chunk has no choices list"),
    (sse({"choices": [{"delta": {"content": 7}}]}), "delta.content is neither"),
    (sse({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c"}]}}]}, "[DONE]"),
     "tool_calls[0] has no function name"),
    (sse({"error": {"message": "model overloaded"}}), "an error inside the stream"),
])
def test_garbage_in_a_stream_is_a_malformed_reply(
    server: FakeServer, chunks: tuple[bytes, ...], problem: str
) -> None:
    error = _failure(server, [Plan(mode="stream", chunks=chunks)])
    assert "malformed chat-completions" in error.message and problem in error.message


def test_a_stalled_stream_fails_after_the_idle_timeout_not_the_call_timeout(
    server: FakeServer,
) -> None:
    error = _failure(server, [Plan(mode="stall", chunks=streamed("thinking", done=False))],
                     idle_timeout=0.3, timeout=600.0)
    assert "sent nothing for 0.3s" in error.message and error.details["status"] == 200
    assert "idle_timeout" in str(error.details["hint"])


def test_a_stream_without_end_fails_at_the_byte_bound(server: FakeServer) -> None:
    error = _failure(server, [Plan(mode="endless", chunks=streamed("x" * 1000, done=False))],
                     max_reply_bytes=64 * 1024)
    assert f"passed {64 * 1024} bytes" in error.message
    assert "max_reply_bytes" in str(error.details["hint"])


def test_an_unstreamed_reply_is_bounded_too(server: FakeServer) -> None:
    server.answer_with([Plan(body=b" " * 5000 + b"{}")])
    model = OpenAICompatibleModel(server.base_url, "key", "m", max_reply_bytes=4096)
    with pytest.raises(ModelError, match="passed 4096 bytes"):
        asyncio.run(model.complete(MESSAGES))


# -- the assembler alone ---------------------------------------------------------------


def test_events_other_than_data_are_skipped_and_lines_may_arrive_split() -> None:
    assembler = StreamAssembler()
    text = (b": keep-alive\r\nevent: message\r\nid: 1\r\nretry: 5\r\n"
            b'data: {"choices":[{"delta":{"content":"he"}}]}\r\n\r\n'
            b'data: {"choices":[{"delta":{"content":"llo"}}]}\n\ndata: [DONE]')
    for at in range(0, len(text), 7):  # seven bytes at a time, across line boundaries
        assembler.feed(text[at:at + 7])
    assembler.close()
    assert assembler.complete and assembler.body()["choices"][0]["message"]["content"] == "hello"


def test_tool_call_pieces_without_an_index_follow_their_id() -> None:
    assembler = StreamAssembler()
    for piece in ({"id": "a", "function": {"name": "send", "arguments": "{"}},
                  {"function": {"arguments": "}"}},
                  {"id": "b", "function": {"name": "send_", "arguments": ""}},
                  {"function": {"name": "message"}}):
        assembler.feed(sse({"choices": [{"delta": {"tool_calls": [piece]}}]})[0])
    calls = assembler.body()["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "send", "{}"), ("b", "send_message", "")]


def test_a_problem_names_the_chunk() -> None:
    with pytest.raises(StreamProblem) as caught:
        StreamAssembler().feed(b"data: [1]\n")
    assert caught.value.chunk == "[1]"


def test_the_reply_is_taken_at_done_whatever_follows(server: FakeServer) -> None:
    # A server that keeps the stream open, or drops it, after [DONE]: the reply is whole.
    for mode in ("stall", "cut"):
        reply = _complete(server, [Plan(mode=mode, chunks=streamed("whole"))], idle_timeout=30)
        assert reply == ModelReply(text="whole")
