"""The reference model's world: plain records, every question the model asks (answered by
scanning the whole world each time), and the verdict of send_message's guards. Nothing here
changes the world; ``reference`` does that. The lifecycle tables (``lifecycle_tables``) and
the addressing, permissions and envelope text (``addressing``) live beside it, re-exported
here.

This module re-states the contract on purpose instead of importing the core's decisions: the
differential test runs the engine and this model side by side, so any place where the two
readings of the contract part ways shows up as a disagreement. Nothing here is fast, and
nothing is cached: the engine keeps O(1) counters and indexes, the model recounts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from treemail.core import errors
from treemail.core.config import MessagingConfig
from treemail.core.lifecycle import (
    ApprovalState,
    MessageState,
    RequestState,
    RunState,
    SessionState,
)
from treemail.core.permissions import Action, Rules
from treemail.core.records import (
    AgentSpec,
    GrantScope,
    Mode,
    Owner,
    RecipientState,
    SendResult,
    ToolContext,
)
from treemail.models.addressing import (
    can_send,
    decide,
    defuse,
    envelope,
    interrupted_notice,
    looks_like_uuid,
    one_line,
    subagent_notice,
)
from treemail.models.lifecycle_tables import (
    FINAL,
    MESSAGE_STEPS,
    REQUEST_STEPS,
    RUN_STEPS,
    SESSION_STEPS,
    step,
)

__all__ = [
    "FINAL",
    "MESSAGE_STEPS",
    "REQUEST_STEPS",
    "RUN_STEPS",
    "SESSION_STEPS",
    "ApprovalRecord",
    "MessageRecord",
    "RunRecord",
    "SessionRecord",
    "Verdict",
    "World",
    "can_send",
    "decide",
    "defuse",
    "envelope",
    "interrupted_notice",
    "judge_send",
    "label_of",
    "looks_like_uuid",
    "one_line",
    "read_arguments",
    "recipient_state",
    "rules_now",
    "step",
    "subagent_notice",
]


# -- records -------------------------------------------------------------------------------------


@dataclass
class SessionRecord:
    session_id: str
    root_session_id: str
    parent_session_id: str | None
    agent: AgentSpec
    handle: str | None
    ordinal: int
    state: str = SessionState.IDLE
    run_id: str | None = None  # the queued or running run; None when idle or finished
    live: bool = True
    external: bool = False  # driven by an MCP client's calls, not by an actor

    @property
    def reference(self) -> str:
        return self.handle if self.handle is not None else self.session_id


@dataclass
class RunRecord:
    """No base hop is stored: ``World.base_hop`` recomputes it from the consumed mail."""

    run_id: str
    session_id: str
    number: int
    status: str = RunState.QUEUED  # queued, running, finished, interrupted
    open_request: str | None = None

    @property
    def request(self) -> str:
        return RequestState.NO_REQUEST if self.open_request is None else RequestState.REQUEST_OPEN


@dataclass
class MessageRecord:
    message_id: str
    recipient: str
    sender: str | None
    owner: Owner
    body: str
    mode: Mode
    hop: int
    seq: int
    state: str = MessageState.ACCEPTED
    run_id: str | None = None  # None: destined for the recipient's next run
    request_id: str | None = None
    reason: str | None = None
    # Expiry's clock (``models.receipts``): unclaimed time summed, and since when it runs.
    waited: float | None = None
    since: float | None = None

    @property
    def pending(self) -> bool:
        return self.state not in FINAL


@dataclass
class ApprovalRecord:
    """A send_message call an ask rule stopped, held until the user answers. Its id is the
    tool call itself. ``outcome``: the result's fields, or ``{"error": code}``."""

    approval_id: str
    session_id: str
    run_id: str
    tool_call_id: str
    tool: str
    arguments: dict[str, object]
    label: str
    state: ApprovalState = ApprovalState.PENDING
    scope: str | None = None
    outcome: dict[str, str] | None = None


Grant = tuple[str, str, str]  # (scope, subject, label)

# The agents' current docs by name; rules are read from them at every check (design.md).
Catalogue = Callable[[str], AgentSpec | None]


def rules_now(agents: Catalogue | None, session: SessionRecord) -> Rules:
    """The session's agent's rules as its doc says today; an unknown agent has none (deny).
    Without a catalogue, the rules the session was created with."""
    if agents is None:
        return session.agent.rules
    spec = agents(session.agent.name)
    return Rules() if spec is None else spec.rules


@dataclass
class World:
    """Everything durable. Dicts keep insertion order: sessions by creation, mail by acceptance."""

    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    messages: dict[str, MessageRecord] = field(default_factory=dict)
    # (session, run, tool_call) -> the result the first call returned
    results: dict[tuple[str, str, str], SendResult] = field(default_factory=dict)
    # (session, run, tool_call) -> the arguments (to, body, mode) of that first call
    calls: dict[tuple[str, str, str], tuple[str, str, Mode]] = field(default_factory=dict)
    # (recipient, producer kind, idempotency key) -> the message id the first accept under
    # that key returned, and its mail (body, mode, sender)
    produced: dict[tuple[str, Owner, str], tuple[str, tuple[str, Mode, str | None]]] = field(
        default_factory=dict)
    grants: set[Grant] = field(default_factory=set)
    approvals: dict[str, ApprovalRecord] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)  # delegated sessions whose result went up

    # -- questions, each answered by a full scan ---------------------------------------------

    def pending_of(self, session_id: str) -> list[MessageRecord]:
        """The session's unacknowledged mail in acceptance order."""
        return [m for m in self.messages.values() if m.recipient == session_id and m.pending]

    def waiting_for(self, session_id: str, run_id: str | None) -> list[MessageRecord]:
        """Mail ready to be put into a request of ``run_id`` (None: of the next run)."""
        return [
            m for m in self.pending_of(session_id)
            if m.state in (MessageState.ADMITTED, MessageState.RELEASED) and m.run_id == run_id
        ]

    def agent_mail_pending(self, recipient: str) -> int:
        return len([m for m in self.pending_of(recipient) if m.owner is Owner.AGENT])

    def pair_pending(self, sender: str, recipient: str) -> int:
        return len([m for m in self.pending_of(recipient)
                    if m.owner is Owner.AGENT and m.sender == sender])

    def base_hop(self, run_id: str) -> int:
        """The highest hop among the agent mail the run has consumed (0 if none)."""
        hops = [m.hop for m in self.messages.values() if m.run_id == run_id
                and m.state == MessageState.CONSUMED and m.owner is Owner.AGENT]
        return max(hops, default=0)

    def next_seq(self, recipient: str) -> int:
        return 1 + len([m for m in self.messages.values() if m.recipient == recipient])

    def next_run_number(self, session_id: str) -> int:
        return 1 + len([r for r in self.runs.values() if r.session_id == session_id])

    def tree_of(self, root_session_id: str) -> list[SessionRecord]:
        return [s for s in self.sessions.values() if s.root_session_id == root_session_id]

    def text_for(self, recipient: SessionRecord, message: MessageRecord,
                 agents: Catalogue | None = None) -> str:
        """What the recipient's model sees. Agent mail comes in its envelope; delegation mail
        a child of the recipient sent is that child's result, in its notice; anything else
        (user, plugin, goal mail, a task) is shown bare. Every text is defused alike."""
        sender = self.sessions.get(message.sender) if message.sender is not None else None
        if sender is None:
            return defuse(message.body)
        if message.owner is Owner.AGENT:
            return envelope(sender.reference, message.body,
                            can_send(rules_now(agents, recipient)))
        if message.owner is Owner.DELEGATION and sender.parent_session_id == recipient.session_id:
            return subagent_notice(sender.reference, message.body)
        return defuse(message.body)

    def resolve(self, sender: SessionRecord, to: str) -> SessionRecord:
        """A session id names any session, then it must share the sender's root; anything else
        is the handle of a live session of the sender's tree."""
        if looks_like_uuid(to):
            recipient = self.sessions.get(to.lower())
            if recipient is None:
                raise errors.UnknownSession("unknown", session_id=to.lower())
            if recipient.root_session_id != sender.root_session_id:
                raise errors.NotTreePeer("other tree", session_id=to.lower())
            return recipient
        peers = [p for p in self.tree_of(sender.root_session_id) if p.live]
        for peer in peers:
            if peer.handle == to:
                return peer
        # At most 20 listed: parent, children, siblings, then the rest, each in tree order.
        others = [p for p in peers if p is not sender]
        rank = {"parent": 0, "child": 1, "sibling": 2, "*": 3}
        others.sort(key=lambda p: rank[label_of(sender, p)])
        raise errors.UnknownSubagentReference(
            "unknown", reference=to, candidates=[p.session_id for p in others[:20]],
            more=max(len(others) - 20, 0))

    def permit(self, rules: Rules, sender: SessionRecord, recipient: SessionRecord,
               ctx: ToolContext) -> Grant | None:
        """Allowed outright or by a lasting grant: None; by a once-grant: that grant, which
        the send spends; otherwise the permission error."""
        label = label_of(sender, recipient)
        action = decide(rules, label)
        if action is Action.ALLOW:
            return None
        if action is Action.DENY:
            raise errors.PermissionDenied("denied", label=label)
        once = (GrantScope.ONCE, f"{ctx.session_id}/{ctx.run_id}/{ctx.tool_call_id}", label)
        if once in self.grants:
            return once
        lasting = {(GrantScope.SESSION, sender.session_id, label),
                   (GrantScope.TREE, sender.root_session_id, label)}
        if lasting & self.grants:
            return None
        raise errors.ApprovalRequired("ask", label=label)


# -- send_message: every guard, in design.md's order -------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The guards let a call through: as a replay of ``replay``, or as a new message."""

    sender: SessionRecord
    recipient: SessionRecord
    replay: SendResult | None = None
    to: str = ""
    mode: Mode = Mode.STEER
    body: str = ""
    hop: int = 0
    spend: Grant | None = None


def judge_send(
    world: World, config: MessagingConfig, ctx: ToolContext, arguments: object,
    approved: bool = False, agents: Catalogue | None = None,
) -> Verdict:
    """The first failing check raises. ``approved``: the user approved this held call, so its
    run may have ended meanwhile."""
    if not config.enabled:
        raise errors.MessagingDisabled("disabled")
    to, body, mode = read_arguments(arguments)
    sender, run = world.sessions.get(ctx.session_id), world.runs.get(ctx.run_id)
    if sender is None or run is None or run.session_id != ctx.session_id:
        raise errors.InvalidToolContext("no such run of that session")
    # A retry is answered before anything that reads today's config or tree.
    call = (ctx.session_id, ctx.run_id, ctx.tool_call_id)
    replay = world.results.get(call)
    if replay is not None:
        if world.calls[call] != (to, body, mode):
            raise errors.IdempotencyConflict("same call id, other arguments")
        return Verdict(sender, world.sessions[world.messages[replay.message_id].recipient],
                       replay)
    check_body(body, config)
    recipient = world.resolve(sender, to)
    if recipient is sender:
        raise errors.SelfSend("self")
    if run.status != RunState.RUNNING and not approved:
        raise errors.InvalidToolContext("run not running")
    spend = world.permit(rules_now(agents, sender), sender, recipient, ctx)
    hop = world.base_hop(run.run_id) + 1
    if config.max_hops > 0 and hop > config.max_hops:
        raise errors.MaxHopsExceeded("hops")
    if world.agent_mail_pending(recipient.session_id) >= config.max_pending_per_session:
        raise errors.InboxFull("inbox")
    window = config.max_inflight_per_pair
    if window > 0 and world.pair_pending(sender.session_id, recipient.session_id) >= window:
        raise errors.InflightFull("pair")
    return Verdict(sender, recipient, None, to, mode, body, hop, spend)


def check_body(body: str, config: MessagingConfig) -> None:
    if body == "" or body.isspace():
        raise errors.InvalidBody("empty")
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError:
        raise errors.InvalidBody("not unicode") from None
    if size > config.max_body_bytes:
        raise errors.InvalidBody("too long")


# -- addressing ---------------------------------------------------------------------------------


def label_of(sender: SessionRecord, recipient: SessionRecord) -> str:
    """The recipient as the sender sees it, from the stored parent links alone."""
    if sender.parent_session_id == recipient.session_id:
        return "parent"
    if recipient.parent_session_id == sender.session_id:
        return "child"
    same_parent = recipient.parent_session_id == sender.parent_session_id
    if sender.parent_session_id is not None and same_parent:
        return "sibling"
    return "*"


# -- send_message's argument object and result ------------------------------------------------


def read_arguments(arguments: object) -> tuple[str, str, Mode]:
    """Exactly ``to`` and ``body``, optionally ``mode``; the old spelling is refused by name."""
    if not isinstance(arguments, Mapping):
        raise errors.InvalidArguments("not an object")
    keys = list(arguments)
    if "recipient_session_id" in keys:
        raise errors.InvalidArguments("renamed to `to`")
    if any(key not in ("to", "body", "mode") for key in keys):
        raise errors.InvalidArguments("unknown argument")
    if "to" not in keys or "body" not in keys:
        raise errors.InvalidArguments("missing argument")
    to, body, mode = arguments["to"], arguments["body"], arguments.get("mode", "steer")
    if not isinstance(to, str) or to == "" or to.isspace():
        raise errors.InvalidArguments("bad `to`")
    if not isinstance(body, str):
        raise errors.InvalidArguments("bad `body`")
    if mode not in ("steer", "queue") or not isinstance(mode, str):
        raise errors.InvalidArguments("bad `mode`")
    return to, body, Mode(mode)


def recipient_state(recipient: SessionRecord) -> RecipientState:
    if recipient.state == SessionState.RUNNING:
        return RecipientState.RUNNING
    if recipient.state == SessionState.FINISHED:
        return RecipientState.WAKING_FINISHED
    return RecipientState.QUEUED
