"""Model adapters: the scripted model, and the OpenAI-compatible adapter both against
``httpx.MockTransport`` and against a real HTTP server this module starts on 127.0.0.1.

Async code runs under ``asyncio.run`` inside plain test functions: no pytest plugin needed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import attrs
import httpx
import pytest

from treemail.adapters.runtime.llm import (
    Model,
    ModelError,
    ModelReply,
    OpenAICompatibleModel,
    ScriptedModel,
    ScriptExhausted,
    ToolCall,
    parse_reply,
    tool_result_message,
)
from treemail.core.errors import TreemailError
from treemail.core.tools import tool_definitions

T = TypeVar("T")
KEY = "sk-test-secret"
MESSAGES = [{"role": "system", "content": "You are explore."},
            {"role": "user", "content": "List the modules."}]
TOOLS = tool_definitions(["send_message"])


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def call_json(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


TOOL_REPLY = completion({"role": "assistant", "content": None, "tool_calls": [
    call_json("call_1", "send_message", '{"to": "main_00000001", "body": "done"}'),
]})
TEXT_REPLY = completion({"role": "assistant", "content": "All modules listed."})


# -- scripted ----------------------------------------------------------------------------


def test_scripted_model_replies_in_order_and_records_requests() -> None:
    call = ToolCall("call_1", "send_message", {"to": "main_00000001", "body": "hi"})
    model = ScriptedModel(["thinking", call, ModelReply(text="done")])
    history: list[dict[str, Any]] = [dict(m) for m in MESSAGES]
    replies = [run(model.complete(history, TOOLS)) for _ in range(3)]
    assert replies == [ModelReply(text="thinking"), ModelReply(tool_calls=(call,)),
                       ModelReply(text="done")]
    assert model.remaining == 0
    history.append({"role": "user", "content": "later"})
    assert model.requests[0] == (MESSAGES, TOOLS), "a recorded request is a copy"
    with pytest.raises(ScriptExhausted) as caught:
        run(model.complete(history))
    assert isinstance(caught.value, ModelError)
    assert "3 step(s)" in caught.value.message and "later" in caught.value.message


def test_scripted_model_from_a_function_of_the_messages() -> None:
    model: Model = ScriptedModel(lambda messages: ModelReply(text=f"{len(messages)} messages"))
    assert run(model.complete(MESSAGES)).text == "2 messages"


def test_scripted_model_rejects_a_bad_step() -> None:
    with pytest.raises(TypeError, match="ModelReply, ToolCall or str"):
        ScriptedModel([42])  # type: ignore[list-item]


def test_reply_as_message_and_tool_result() -> None:
    reply = ModelReply(text=None, tool_calls=(
        ToolCall("c1", "send_message", {"to": "x", "body": "é"}),
        ToolCall("c2", "send_message", "{not json"),
    ))
    message = reply.as_message()
    assert message["role"] == "assistant" and message["content"] is None
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == [
        '{"to": "x", "body": "é"}', "{not json"]
    assert parse_reply(completion(message)) == reply, "the wire format round-trips"
    assert ModelReply(text="hi").as_message() == {"role": "assistant", "content": "hi"}
    assert tool_result_message("c1", "ok") == {"role": "tool", "tool_call_id": "c1",
                                               "content": "ok"}


# -- response parsing --------------------------------------------------------------------


def test_parse_tool_calls_text_and_arguments() -> None:
    body = completion({"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                        {"type": "text", "text": "b"}],
                       "tool_calls": [
                           call_json("c1", "send_message", '{"to": "x", "body": "y"}'),
                           call_json("c2", "send_message", '{"to": "x", "body": '),
                           call_json("c3", "send_message", "[1, 2]"),
                           {"id": "c4", "type": "function",
                            "function": {"name": "cancel_subagent", "arguments": {"to": "z"}}},
                       ]})
    reply = parse_reply(body)
    assert reply.text == "ab"
    assert [c.arguments for c in reply.tool_calls] == [
        {"to": "x", "body": "y"}, '{"to": "x", "body": ', "[1, 2]", {"to": "z"}]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"error": "nope"}, "no choices[0]"),
        ({"choices": []}, "no choices[0]"),
        ([1], "no choices[0]"),
        ({"choices": [{"text": "legacy"}]}, "no message object"),
        (completion({"content": 3}), "message.content"),
        (completion({"content": None, "tool_calls": {}}), "not a list"),
        (completion({"content": None, "tool_calls": ["x"]}), "no function object"),
        (completion({"content": None, "tool_calls": [
            {"type": "function", "function": {"name": "send_message", "arguments": "{}"}}]}),
         "has no id"),
        (completion({"content": None, "tool_calls": [call_json("c", "", "{}")]}),
         "no function name"),
    ],
)
def test_malformed_responses_are_model_errors(body: object, problem: str) -> None:
    with pytest.raises(ModelError, match="malformed chat-completions response") as caught:
        parse_reply(body)
    assert problem in caught.value.message
    assert caught.value.code == ModelError.code and isinstance(caught.value, TreemailError)


# -- the adapter over httpx.MockTransport -----------------------------------------------


def mock_model(handler: Callable[[httpx.Request], httpx.Response],
               **options: Any) -> OpenAICompatibleModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAICompatibleModel("http://models.test/v1/", KEY, "m-1", client=client, **options)


def test_retries_429_and_5xx_when_asked() -> None:
    answers = iter([httpx.Response(429, headers={"Retry-After": "3"}, text="slow down"),
                    httpx.Response(503, text="busy"), httpx.Response(200, json=TEXT_REPLY)])
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    model = mock_model(lambda request: next(answers), max_retries=2, backoff=0.5, sleep=sleep)
    assert run(model.complete(MESSAGES)).text == "All modules listed."
    assert delays == [3.0, 1.0]


def test_no_retry_by_default_and_none_for_client_errors() -> None:
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        return httpx.Response(500 if len(seen) == 1 else 400, text="err")

    with pytest.raises(ModelError, match="HTTP 500: the server failed"):
        run(mock_model(handler).complete(MESSAGES))
    with pytest.raises(ModelError, match="HTTP 400") as caught:
        run(mock_model(handler, max_retries=3, sleep=_no_sleep).complete(MESSAGES))
    assert len(seen) == 2 and caught.value.details["status"] == 400


def test_retries_exhausted_reports_the_attempts() -> None:
    model = mock_model(lambda request: httpx.Response(502, text="bad gateway"), max_retries=2,
                       sleep=_no_sleep)
    with pytest.raises(ModelError, match="HTTP 502 after 3 attempts"):
        run(model.complete(MESSAGES))


def test_transport_failures_are_model_errors() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ModelError, match=r"could not reach .*check base_url"):
        run(mock_model(refuse).complete(MESSAGES))

    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ModelError, match=r"within 2\.5s"):
        run(mock_model(hang, timeout=2.5).complete(MESSAGES))


def test_no_key_no_authorization_header_and_no_key_in_repr() -> None:
    headers: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers)
        return httpx.Response(200, json=TEXT_REPLY)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    run(OpenAICompatibleModel("http://local/v1", None, "m", client=client).complete(MESSAGES))
    assert "authorization" not in headers[0]
    assert KEY not in repr(mock_model(handler))
    with pytest.raises(ValueError):
        OpenAICompatibleModel("http://local/v1", None, "m", max_retries=-1)


async def _no_sleep(seconds: float) -> None:
    return None


# -- the adapter over a real local socket -----------------------------------------------


@attrs.define
class Answer:
    status: int
    body: bytes
    wait: bool = False  # hold the answer until the test ends: a server that never replies


@attrs.define
class FakeServer:
    url: str
    answers: list[Answer] = attrs.field(factory=list)
    received: list[dict[str, Any]] = attrs.field(factory=list)
    release: threading.Event = attrs.field(factory=threading.Event)

    def answer(self, status: int, body: object, *, wait: bool = False) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers.append(Answer(status, raw, wait))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # 127.0.0.1 must not go through a proxy
    fake = FakeServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            fake.received.append({"path": self.path, "headers": dict(self.headers),
                                  "body": json.loads(self.rfile.read(length))})
            answer = fake.answers.pop(0)
            if answer.wait:
                fake.release.wait(10)
            try:
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a held answer outlived the client's timeout: the client left, as meant

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output quiet

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,),
                              daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield fake
    finally:
        fake.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def socket_model(server: FakeServer, **options: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(server.url, KEY, "treemail-test", **options)


def test_tool_calling_reply_and_the_request_sent(server: FakeServer) -> None:
    server.answer(200, TOOL_REPLY)
    reply = run(socket_model(server).complete(MESSAGES, TOOLS))
    assert reply == ModelReply(text=None, tool_calls=(
        ToolCall("call_1", "send_message", {"to": "main_00000001", "body": "done"}),))
    (request,) = server.received
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["body"] == {"model": "treemail-test", "messages": MESSAGES, "tools": TOOLS}


def test_plain_text_reply_sends_no_tools(server: FakeServer) -> None:
    server.answer(200, TEXT_REPLY)

    async def with_client() -> ModelReply:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await socket_model(server, client=client).complete(MESSAGES)

    assert run(with_client()) == ModelReply(text="All modules listed.")
    assert "tools" not in server.received[0]["body"]


def test_unparseable_arguments_are_kept_raw(server: FakeServer) -> None:
    server.answer(200, completion({"role": "assistant", "content": "", "tool_calls": [
        call_json("call_9", "send_message", "{'to': 'x'}")]}))
    (call,) = run(socket_model(server).complete(MESSAGES, TOOLS)).tool_calls
    assert call == ToolCall("call_9", "send_message", "{'to': 'x'}")


@pytest.mark.parametrize(("status", "hint"),
                         [(500, "the server failed"), (401, "check the API key")])
def test_http_errors(server: FakeServer, status: int, hint: str) -> None:
    server.answer(status, {"error": {"message": "boom " * 200}})
    with pytest.raises(ModelError) as caught:
        run(socket_model(server).complete(MESSAGES))
    error = caught.value
    assert f"answered HTTP {status}: {hint}" in error.message
    assert "boom" in error.message and "chars)" in error.message, "an excerpt, not everything"
    assert error.details["status"] == status and KEY not in str(error)


def test_timeout(server: FakeServer) -> None:
    server.answer(200, TEXT_REPLY, wait=True)
    with pytest.raises(ModelError, match=r"no answer from .* within 0.2s .*raise the timeout"):
        run(socket_model(server, timeout=0.2).complete(MESSAGES))


def test_malformed_body(server: FakeServer) -> None:
    server.answer(200, b"<html>gateway page</html>")
    server.answer(200, {"choices": "none"})
    with pytest.raises(ModelError, match=r"not JSON.*<html>gateway page"):
        run(socket_model(server).complete(MESSAGES))
    with pytest.raises(ModelError, match="no choices"):
        run(socket_model(server).complete(MESSAGES))


def test_unreachable_server() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def call() -> ModelReply:
        async with httpx.AsyncClient(trust_env=False) as client:
            model = OpenAICompatibleModel(f"http://127.0.0.1:{port}/v1", KEY, "m", timeout=2,
                                          client=client)
            return await model.complete(MESSAGES)

    with pytest.raises(ModelError, match=r"could not reach .*check base_url") as caught:
        run(call())
    assert caught.value.details["status"] is None


def test_an_unencodable_request_is_a_model_error_not_a_unicode_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing unencodable may reach the wire")

    bad = [{"role": "user", "content": "lone \ud800 surrogate"}]
    with pytest.raises(ModelError, match=r"cannot be encoded as UTF-8 JSON"):
        run(mock_model(answer).complete(bad))


def test_an_os_level_transport_failure_is_a_model_error() -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise OSError("network is unreachable")

    with pytest.raises(ModelError, match=r"could not reach"):
        run(mock_model(fail).complete(MESSAGES))


# -- bodies and headers the reply fuzzer found (tests/fuzz/test_openai_fuzz.py) ----------


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,  # RecursionError from the JSON parser
    json.dumps({"choices": [{"message": {"tool_calls": [call_json(
        "c1", "send_message", "[" * 100_000)]}}]}).encode(),  # ... from the arguments' one
])
def test_json_nested_past_the_parsers_limit_is_no_crash(body: bytes) -> None:
    model = mock_model(lambda request: httpx.Response(200, content=body))
    try:
        reply = run(model.complete(MESSAGES))
    except ModelError as error:
        assert "not JSON" in error.message
    else:  # deep arguments stay raw text, for the tool layer to refuse
        assert isinstance(reply.tool_calls[0].arguments, str)


@pytest.mark.parametrize("status", [200, 500])
def test_a_body_its_charset_cannot_decode_is_a_model_error(status: int) -> None:
    answer = httpx.Response(status, content=b"\x00\x00",
                            headers={"Content-Type": "application/json; charset=utf-16"})
    with pytest.raises(ModelError):
        run(mock_model(lambda request: answer).complete(MESSAGES))


@pytest.mark.parametrize(("header", "delay"), [("inf", 0.5), ("1e308", 60.0), ("nan", 0.5),
                                               ("-4", 0.0), ("7", 7.0)])
def test_retry_after_is_bounded(header: str, delay: float) -> None:
    answers = iter([httpx.Response(503, headers={"Retry-After": header}, text="busy"),
                    httpx.Response(200, json=TEXT_REPLY)])
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    model = mock_model(lambda request: next(answers), max_retries=1, backoff=0.5, sleep=sleep)
    run(model.complete(MESSAGES))
    assert delays == [delay]
