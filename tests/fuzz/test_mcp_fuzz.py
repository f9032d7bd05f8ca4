"""MCP tool arguments, fuzzed from the tools' own schemas (hypothesis-jsonschema) and beyond
them, through the SDK's client, ``treemail mcp`` over stdio and a daemon subprocess: every
call ends in a result or a typed error from the registry, and every accepted send is from
the session the token binds, whatever the arguments said."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from mcp.types import CallToolResult

from tests.daemon.conftest import DaemonProcess
from tests.daemon.mcp.harness import Tree, data_dir, make_tree, stdio_session, text, token_file
from tests.fuzz.conftest import TALLY, budget
from tests.fuzz.strategies import arguments
from treemail.adapters.mcp.server import CHECK_MAIL, tool_schema
from treemail.core import errors
from treemail.protocol import methods as m
from treemail.protocol import types as t

CODES = {getattr(errors, name).code for name in errors.__all__
         if isinstance(getattr(errors, name), type)
         and issubclass(getattr(errors, name), errors.TreemailError)}

TOOLS = ("send_message", "get_subagent_result", CHECK_MAIL)


class Driver:
    """One MCP client session kept open across examples, on an event loop of its own (each
    Hypothesis example is a plain call)."""

    def __init__(self, daemon: DaemonProcess, tree: Tree, token_path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.calls: asyncio.Queue[tuple[str, Any, Future[Any]]] | None = None
        self.ready: Future[None] = Future()
        self.thread = threading.Thread(target=self.loop.run_until_complete,
                                       args=(self._serve(daemon, token_path),), daemon=True)
        self.thread.start()
        self.ready.result(timeout=60)

    async def _serve(self, daemon: DaemonProcess, token_path: Path) -> None:
        self.calls = asyncio.Queue()
        try:
            user = await daemon.client()
            async with stdio_session(daemon, token_path) as session:
                self.ready.set_result(None)
                while (item := await self.calls.get())[0]:
                    name, args, answer = item
                    try:
                        if name == m.MESSAGE_GET.name:  # the user's view of a message
                            answer.set_result(msgspec.to_builtins(await user.request(
                                m.MESSAGE_GET, msgspec.convert(args, t.MessageGetParams))))
                        else:
                            answer.set_result(await session.call_tool(name, args))
                    except BaseException as exc:  # handed to the example, which fails
                        answer.set_exception(exc)
            await user.close()
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)

    def call(self, name: str, args: Any) -> Any:
        answer: Future[Any] = Future()
        assert self.calls is not None
        self.loop.call_soon_threadsafe(self.calls.put_nowait, (name, args, answer))
        return answer.result(timeout=60)

    def close(self) -> None:
        assert self.calls is not None
        self.loop.call_soon_threadsafe(self.calls.put_nowait, ("", None, Future()))
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Driver, Tree]]:
    base = tmp_path_factory.mktemp("mcp-fuzz")
    daemon = DaemonProcess(data_dir(base / "data"))
    try:
        async def tree_of() -> Tree:
            client = await daemon.client()
            try:
                return await make_tree(client)
            finally:
                await client.close()

        tree = asyncio.run(tree_of())
        driver = Driver(daemon, tree, token_file(base, tree.members[0].token))
        try:
            yield driver, tree
        finally:
            driver.close()
    finally:
        code, err = daemon.terminate()
        assert code == 0, err


def _utf8(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def from_tool(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Argument objects valid by the MCP tool's input schema: each property's values from
    its own JSON Schema by hypothesis-jsonschema, the object built here (its object
    strategy fails on this Hypothesis version: it reaches into Hypothesis internals)."""
    schema = tool_schema(name)
    properties = {key: from_schema(value) for key, value in schema["properties"].items()}
    required = {key: properties[key] for key in schema.get("required", ())}
    optional = {key: value for key, value in properties.items() if key not in required}
    return st.fixed_dictionaries(required, optional=optional)


def _aimed(tree: Tree) -> st.SearchStrategy[Any]:
    """Arguments as the schemas allow them, sometimes aimed at a real peer of the tree."""
    peers = st.sampled_from([tree.lead, tree.members[1].handle, tree.members[0].handle,
                             tree.lead_id])
    return st.one_of(
        *(from_tool(name) for name in TOOLS),
        st.builds(lambda args, to: {**args, "to": to}, from_tool("send_message"), peers),
        arguments("send_message"))


@settings(max_examples=budget(200))
@given(data=st.data())
def test_mcp_tool_calls_end_in_a_result_or_a_typed_error(
    driven: tuple[Driver, Tree], data: st.DataObject,
) -> None:
    driver, tree = driven
    name = data.draw(st.sampled_from(TOOLS), label="tool")
    args = data.draw(_aimed(tree), label="arguments")
    if not isinstance(args, dict):  # MCP carries an object of arguments, or none
        args = {"value": args}
    # JSON text on the wire is UTF-8: a lone surrogate cannot reach the server at all (the
    # client's transport refuses to encode it), so it is no input of the server's.
    assume(_utf8(args))
    result: CallToolResult = driver.call(name, args)
    if name == CHECK_MAIL and not result.is_error:
        assert args == {}
        assert result.structured_content is not None
        TALLY["mcp tool calls"]["check_mail"] += 1
        return
    said = json.loads(text(result))
    if result.is_error:
        assert said["error"] in CODES, said
        assert said["message"]
        TALLY["mcp tool calls"][said["error"]] += 1
        return
    assert name != CHECK_MAIL
    if name == "send_message":
        assert set(said) == {"message_id", "mode", "recipient_state"}, said
        stored = driver.call(m.MESSAGE_GET.name, {"message_id": said["message_id"]})["message"]
        assert stored["sender"] == tree.members[0].session_id  # the token's, always
    TALLY["mcp tool calls"][f"{name} ok"] += 1
