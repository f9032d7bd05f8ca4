"""Executing a model's tool calls against the engine.

Each call runs with the executing tool context (session, run, tool call id): the sender of a
send_message is that context, never an argument. Every refusal becomes a tool result carrying
its stable code, so a model can react (retry, give up, report) instead of the run failing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

import attrs

from treemail.adapters.runtime.llm import ToolCall
from treemail.core import events, results
from treemail.core.addressing import MAX_CANDIDATES, describe_peer, resolve
from treemail.core.engine import Engine
from treemail.core.errors import (
    ApprovalRequired,
    DelegatingRunEnded,
    DelegationDenied,
    NotASubagent,
    NotTreePeer,
    Refusal,
    ToolFailed,
    UnknownAgent,
    UnknownSession,
    UnknownSubagent,
    UnknownSubagentReference,
)
from treemail.core.lifecycle import SessionState
from treemail.core.records import AgentSpec, SendResult, Session, ToolContext
from treemail.core.results import CallOutcome
from treemail.core.tools import RECEIPT_TOOLS, InvalidToolArguments, check_keys, lookup_tool

__all__ = ["Call", "Hooks", "ToolBox", "ToolOutcome"]


class Call(Protocol):
    """Runs an engine operation on the runtime's single writer thread."""

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Awaitable[Any]: ...


@attrs.frozen
class ToolOutcome:
    """A tool call's result as the model sees it, the sessions the runtime must poke, those
    whose run the call ended (``stop``), and the approval the call waits for, if any."""

    call_id: str
    content: str
    poke: tuple[str, ...] = ()
    approval: ApprovalRequired | None = None
    stop: tuple[str, ...] = ()
    failure: BaseException | None = None  # an unexpected error behind a tool:failed result


class Hooks(Protocol):
    async def tool_before_call(self, session: Session, call: ToolCall) -> None:
        """Audit a tool call, or refuse it by raising a ``Refusal``."""
        ...


def _error(call: ToolCall, error: Refusal) -> ToolOutcome:
    return ToolOutcome(call.id, results.error_text(error))


def _ok(call: ToolCall, result: Mapping[str, object], *poke: str) -> ToolOutcome:
    return ToolOutcome(call.id, results.ok_text(result), poke)


class ToolBox:
    def __init__(
        self,
        engine: Engine,
        call: Call,
        agents: Mapping[str, AgentSpec],
        hooks: Hooks | None = None,
    ) -> None:
        self.engine = engine
        self.call = call
        self.agents = agents
        self.hooks = hooks
        # External sessions (an MCP client's): offered the receipt tools whatever their doc.
        self.external: Collection[str] = ()

    def visible(self, session: Session) -> list[str]:
        """The tools a session's model is offered: the delegation tools unless its delegate
        rules deny every agent, send_message only under an allow/ask message rule."""
        names: list[str] = []
        if session.agent.delegates:
            names += ["delegate_subagent", "get_subagent_result", "cancel_subagent"]
        if self.engine.rules_of(session).visible:
            names.append("send_message")
        current = self.agents.get(session.agent.name, session.agent)
        if current.receipts or session.session_id in self.external:
            names += RECEIPT_TOOLS
        return names

    async def execute(self, session: Session, run_id: str, call: ToolCall,
                      replay_slot: str | None = None) -> ToolOutcome:
        """``replay_slot``: where a retry of the call finds its first result, when not
        under ``run_id`` (``ToolContext.replay_slot``)."""
        try:
            lookup_tool(call.name, self.visible(session))
            if self.hooks is not None:
                await self.hooks.tool_before_call(session, call)
            return await self._dispatch(session, run_id, call, replay_slot)
        except ApprovalRequired as waiting:
            return attrs.evolve(_error(call, waiting), approval=waiting)
        except Refusal as refused:
            return _error(call, refused)
        except Exception as error:  # every call ends in a typed result, never a dead actor
            # Engine calls are single transactions: a failed one changed nothing.
            failed = ToolFailed(f"{call.name} failed ({type(error).__name__}) and changed "
                                "nothing; retrying the same call may fail the same way")
            return attrs.evolve(_error(call, failed), failure=error)

    async def _dispatch(self, session: Session, run_id: str, call: ToolCall,
                        replay_slot: str | None = None) -> ToolOutcome:
        ctx = ToolContext(session.session_id, run_id, call.id, replay_slot=replay_slot)
        if call.name == "send_message":
            result, recipient = await self.call(self._send, ctx, call.arguments)
            return _ok(call, result.as_tool_result(), recipient)
        arguments = _object(call)
        check_keys(call.name, arguments)
        if call.name == "delegate_subagent":
            return await self._delegate(session, run_id, call, arguments)
        if call.name in RECEIPT_TOOLS:
            return _ok(call, await self.call(self._receipt, session, call.name,
                                             _string(arguments, "message_id")))
        reference = _string(arguments, "to")
        if call.name == "cancel_subagent":
            answer, stopped = await self.call(self._cancel, session, reference)
            return attrs.evolve(_ok(call, answer), stop=stopped)
        return _ok(call, await self.call(self._result, session, reference))

    # Each delegation tool is one writer job: the lookup and the action see the same state,
    # so a child that finishes, or a caller's run that ends, cannot fall between them.

    async def _delegate(
        self, session: Session, run_id: str, call: ToolCall, arguments: Mapping[str, Any]
    ) -> ToolOutcome:
        name, task = _string(arguments, "agent"), _string(arguments, "task")
        if not task.strip():  # the engine refuses it too; here the model learns why
            raise InvalidToolArguments("argument 'task' is only whitespace; give the subagent "
                                       "a task to work on")
        spec = self.agents.get(name)
        if spec is None:
            raise UnknownAgent(f"no agent {name!r}; known agents: {', '.join(self.agents)}",
                               agent=name, known=list(self.agents))
        if not session.agent.may_delegate(name):
            raise DelegationDenied(
                f"permission denied: your rules do not allow delegating to agent {name!r}",
                agent=name)
        description = _optional_string(arguments, "description")
        child: Session = await self.call(self._create_child, session.session_id, run_id,
                                         spec, task, description)
        return _ok(call, {"session_id": child.session_id, "handle": child.reference},
                   child.session_id)

    def _create_child(self, parent_id: str, run_id: str, spec: AgentSpec, task: str,
                      description: str) -> Session:
        parent = self.engine.session(parent_id)
        if parent.run_id != run_id or parent.state is not SessionState.RUNNING:
            raise DelegatingRunEnded(
                f"your run {run_id} ended before this delegation took effect (the session is "
                f"{parent.state} now); no subagent was created", run_id=run_id,
                state=parent.state)
        return self.engine.delegate(parent_id, spec, task, description=description)

    def _cancel(self, parent: Session, reference: str) -> tuple[dict[str, object],
                                                               tuple[str, ...]]:
        """Cancel the child's run in flight, if it has one: a child that already finished is
        an answer (not cancelled, and its state), never an error."""
        child = self._child(parent, reference)
        if child.run_id is None:
            return {"cancelled": False, "status": child.state}, ()
        self.engine.cancel_run(child.session_id, child.run_id, "cancelled by parent")
        return {"cancelled": True}, (child.session_id,)

    def _receipt(self, session: Session, tool: str, message_id: str) -> dict[str, object]:
        """message_status, or cancel_message: always as the calling session, its sender."""
        act = (self.engine.cancel_message if tool == "cancel_message"
               else self.engine.message_status)
        return act(session.session_id, message_id).as_result()

    def _send(self, ctx: ToolContext, arguments: object) -> tuple[SendResult, str]:
        # One writer job, not two: the recipient to poke is read right after the send.
        result = self.engine.send_message(ctx, arguments)
        return result, self.engine.message(result.message_id).recipient

    def recipient_of(self, outcome: CallOutcome | None) -> str | None:
        """The session a send's outcome delivered to; None for an error."""
        message_id = outcome.result.get("message_id") if outcome and outcome.result else None
        if message_id is None:
            return None
        return self.engine.message(message_id).recipient

    def _peer(self, sender: Session, reference: str) -> Session:
        with self.engine.store.read() as tx:
            return resolve(tx, sender, reference)

    def _child(self, parent: Session, reference: str) -> Session:
        """The direct child ``reference`` names, or a delegation refusal saying why not."""
        try:
            child = self._peer(parent, reference)
        except (UnknownSession, UnknownSubagentReference):
            raise UnknownSubagent(
                f"unknown subagent {reference!r}: it names no session. "
                f"{self._listing(parent)}", reference=reference) from None
        except NotTreePeer:
            child = None
        if child is None or child.parent_session_id != parent.session_id:
            raise NotASubagent(
                f"{reference} is not one of your subagents: the delegation tools reach only "
                f"the subagents you delegated to. {self._listing(parent)}",
                reference=reference)
        return child

    def _listing(self, parent: Session) -> str:
        with self.engine.store.read() as tx:
            children = [s for s in tx.tree(parent.root_session_id)
                        if s.parent_session_id == parent.session_id]
        if not children:
            return "You have no subagents; delegate_subagent creates one."
        shown = "\n".join(f"- {describe_peer(child)}" for child in children[:MAX_CANDIDATES])
        more = len(children) - MAX_CANDIDATES
        return f"Your subagents:\n{shown}" + (f"\n... and {more} more" if more > 0 else "")

    def _result(self, parent: Session, reference: str) -> dict[str, object]:
        """The child's status, and the final reply of its delegated (first) run if it ended,
        read together: a run finishing meanwhile is seen whole or not at all."""
        child = self._child(parent, reference)
        answer: dict[str, object] = {"status": child.state, "result": None}
        for _, payload in events.typed(self.engine.events(child.session_id)):
            if isinstance(payload, events.ModelOutput) and not payload.tool_calls:
                answer["result"] = payload.text
                break
        return answer


def _object(call: ToolCall) -> Mapping[str, Any]:
    if not isinstance(call.arguments, dict):
        raise InvalidToolArguments(f"{call.name} takes a JSON object of arguments")
    return call.arguments


def _optional_string(arguments: object, key: str) -> str:
    """An optional string argument: absent or null is empty; any other non-string is refused."""
    value = arguments.get(key) if isinstance(arguments, dict) else None
    if value is not None and not isinstance(value, str):
        raise InvalidToolArguments(f"argument {key!r} must be a string when given")
    try:
        (value or "").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate cannot be stored: the session would not be written.
        raise InvalidToolArguments(f"argument {key!r} is not valid Unicode text; "
                                   "replace its lone surrogates and call again") from None
    return value or ""


def _string(arguments: object, key: str) -> str:
    value = arguments.get(key) if isinstance(arguments, dict) else None
    if not isinstance(value, str) or not value:
        raise InvalidToolArguments(f"argument {key!r} must be a non-empty string")
    return value
