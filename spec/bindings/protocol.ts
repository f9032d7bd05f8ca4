// Generated from protocol.schema.json by `just write-bindings`; do not edit.

/** The protocol version this file describes: send it in `initialize`. */
export const PROTOCOL_VERSION = 19 as const;

/** The JSON-RPC `error.code` of each family of treemail errors. */
export const WIRE_ERRORS = {
  "-32700": "parse error: the frame is not UTF-8 JSON",
  "-32603": "internal error: a daemon bug; the message says what failed",
  "-32602": "invalid params: the params do not match the method's schema",
  "-32601": "unknown method",
  "-32600": "invalid request: not a JSON-RPC 2.0 message, or a frame over the limit",
  "-32013": "failed: another treemail error",
  "-32012": "storage: the store failed",
  "-32011": "invalid: the operation names something that does not exist or is malformed",
  "-32010": "refused: treemail refused the operation; the store is unchanged",
  "-32004": "unauthorized: a TCP connection must prove it holds the daemon's token",
  "-32003": "unsupported protocol version",
  "-32002": "not initialized: send initialize first",
  "-32001": "overloaded: too many requests in flight on this connection; retry later"
} as const;

/** ``reason`` goes with a deny: the agent reads it in the denied call's result. */
export interface ApprovalAnswerParams {
  approval_id: string;
  approve: boolean;
  scope?: "once" | "session" | "tree";
  reason?: string | null;
}

/** A ApprovalAnswered event. */
export interface ApprovalAnsweredEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ApprovalAnswered";
  data: ApprovalAnsweredData;
}

export interface ApprovalListParams {
  pending_only?: boolean;
}

export interface ApprovalListResult {
  approvals: Array<ApprovalView>;
}

/** What an answered call produced, in the shape the ``ApprovalAnswered`` event records it: the result's fields, or the error's ``error`` code and ``message``. */
export interface ApprovalOutcome {
  result?: Record<string, string> | null;
  error?: string | null;
  message?: string | null;
}

/** A ApprovalRequested event. */
export interface ApprovalRequestedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ApprovalRequested";
  data: ApprovalRequestedData;
}

export type ApprovalState = "approved" | "denied" | "pending";

/** A held tool call; ``outcome``, once answered, is what the call produced. */
export interface ApprovalView {
  approval_id: string;
  session_id: string;
  run_id: string;
  tool_call_id: string;
  tool: string;
  arguments: Record<string, unknown>;
  label: string;
  state: ApprovalState;
  scope: string | null;
  outcome: ApprovalOutcome | null;
}

/** A TCP connection's first request: the client's fresh random nonce. */
export interface AuthChallengeParams {
  client_nonce: string;
}

/** The daemon's fresh nonce, and its proof that it holds the token: HMAC-SHA256(token, "treemail-server" | client_nonce | server_nonce). */
export interface AuthChallengeResult {
  server_nonce: string;
  server_proof: string;
}

/** Sent only once the server's proof checked out: HMAC-SHA256(token, "treemail-client" | server_nonce | client_nonce). */
export interface AuthProveParams {
  client_proof: string;
}

export interface AuthProveResult {
  authenticated: boolean;
}

/** What the client takes part in. A plugin connection asks for ``plugin/event`` notifications (every durable event) and/or to gate tool calls (``plugin/tool_before_call`` requests from the server, answered before the call runs). */
export interface ClientCapabilities {
  plugin_events?: boolean;
  tool_gate?: boolean;
}

export interface ClientInfo {
  name: string;
  version?: string;
}

/** A DelegationCompleted event. */
export interface DelegationCompletedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "DelegationCompleted";
  data: DelegationCompletedData;
}

/** No params. */
export interface Empty {
}

/** A stable treemail error code (spec/errors.json). */
export type ErrorCode =
  | "agent_doc:invalid"
  | "approval:unknown"
  | "client:answer_malformed"
  | "client:answer_too_large"
  | "client:daemon_gone"
  | "client:error"
  | "client:request_too_large"
  | "client:server_unproven"
  | "client:timeout"
  | "config:exists"
  | "config:invalid"
  | "config:unknown_key"
  | "daemon:agent_defined_by_file"
  | "daemon:data_dir_locked"
  | "daemon:listen_failed"
  | "daemon:not_loopback"
  | "daemon:not_owner"
  | "daemon:socket_in_use"
  | "daemon:socket_path_taken"
  | "daemon:token_unsafe"
  | "delegation:denied"
  | "delegation:not_a_subagent"
  | "delegation:refused"
  | "delegation:run_ended"
  | "delegation:unknown_agent"
  | "delegation:unknown_subagent"
  | "engine:invalid_request"
  | "engine:invalid_tool_context"
  | "engine:unknown_target"
  | "external:busy"
  | "external:not_external"
  | "external:out_of_scope"
  | "external:token_revoked"
  | "external:unknown_token"
  | "install:extra_missing"
  | "lifecycle:illegal_transition"
  | "model:error"
  | "model:script_exhausted"
  | "permission:approval_pending"
  | "permission:approval_required"
  | "permission:denied"
  | "plugin:body_too_large"
  | "plugin:failed"
  | "plugin:load_failed"
  | "plugin:refused"
  | "producer:idempotency_conflict"
  | "receipt:too_late"
  | "receipt:unknown_message"
  | "rpc:answer_failed"
  | "rpc:error"
  | "rpc:frame_too_large"
  | "rpc:internal"
  | "rpc:invalid_params"
  | "rpc:invalid_request"
  | "rpc:invalid_utf8"
  | "rpc:method_not_found"
  | "rpc:not_initialized"
  | "rpc:overloaded"
  | "rpc:parse_error"
  | "rpc:token_in_clear"
  | "rpc:too_many_subscriptions"
  | "rpc:unauthorized"
  | "rpc:unsupported_version"
  | "run:not_in_flight"
  | "send_message:disabled"
  | "send_message:engine_shutdown"
  | "send_message:idempotency_conflict"
  | "send_message:inbox_full"
  | "send_message:inflight_full"
  | "send_message:invalid_arguments"
  | "send_message:invalid_body"
  | "send_message:max_hops_exceeded"
  | "send_message:not_tree_peer"
  | "send_message:refused"
  | "send_message:self_send"
  | "send_message:unknown_session"
  | "store:closed"
  | "store:damaged"
  | "store:driver_missing"
  | "store:failure"
  | "store:fenced"
  | "store:full"
  | "store:locked"
  | "store:missing"
  | "store:not_private"
  | "store:outcome_unknown"
  | "store:unknown_format"
  | "store:unknown_url"
  | "subagent:unknown_reference"
  | "tool:failed"
  | "tool:interrupted"
  | "tool:invalid_arguments"
  | "tool:note"
  | "tool:unknown"
  | "treemail:definition"
  | "treemail:refused";

/** What a client branches on: treemail's stable error code, and the error's details. */
export interface ErrorData {
  code: ErrorCode;
  details?: Record<string, unknown>;
}

/** A request's error; ``id`` is null when the request's id could not be read. */
export interface ErrorResponse {
  jsonrpc: "2.0";
  id: number | string | null;
  error: RpcError;
}

/** ``events/event``: the next event of a subscription. */
export interface EventNotification {
  subscription_id: string;
  event: EventView;
}

/** One durable event: ``number`` is its place in the global feed, ``seq`` in its session's log. */
export type EventView =
  | SessionCreatedEvent
  | SessionRevertedEvent
  | SessionForkedEvent
  | RunQueuedEvent
  | RunStartedEvent
  | RunFinishedEvent
  | RunInterruptedEvent
  | RequestBegunEvent
  | RequestCommittedEvent
  | RequestAbortedEvent
  | ModelOutputEvent
  | ToolResultsEvent
  | DelegationCompletedEvent
  | ApprovalRequestedEvent
  | ApprovalAnsweredEvent
  | ProducerMessageAcceptedEvent
  | ProducerMessageAdmittedEvent
  | ProducerMessageClaimedEvent
  | ProducerMessageReleasedEvent
  | ProducerMessageConsumedEvent
  | ProducerMessageDiscardedEvent
  | ExternalTokenIssuedEvent
  | ExternalTokenRevokedEvent;

/** A page of the feed after ``after`` (at most ``limit`` events, 1 to 256, default 256), only ``session_id``'s when given; ``next`` is where the next page starts. */
export interface EventsReadParams {
  after?: number;
  session_id?: string | null;
  limit?: number;
}

export interface EventsReadResult {
  events: Array<EventView>;
  next: number;
  head: number;
}

/** Every event after feed number ``after`` (0: from the start), replayed and then live, in order, each once; only ``session_id``'s when given. */
export interface EventsSubscribeParams {
  after?: number;
  session_id?: string | null;
}

export interface EventsSubscribeResult {
  subscription_id: string;
  head: number;
}

export interface EventsUnsubscribeParams {
  subscription_id: string;
}

export interface EventsUnsubscribeResult {
  unsubscribed: boolean;
}

/** A new external session: a child of ``parent_session_id`` that runs no model, with ``agent``'s doc for its rules; ``description`` is shown to its tree peers. */
export interface ExternalAttachParams {
  parent_session_id: string;
  agent: string;
  description?: string;
}

/** The session, and the one token that binds a client to it (shown once: the daemon keeps only its digest); ``token_id`` names the token in listings and revocations. */
export interface ExternalAttachResult {
  session: SessionView;
  token: string;
  token_id: string;
}

/** Bind this connection to the session ``token`` names, for the connection's life. */
export interface ExternalBindParams {
  token: string;
}

/** The bound session and the tools its rules offer now. */
export interface ExternalBindResult {
  session: SessionView;
  tools: Array<string>;
}

/** Run a tool as the bound session. ``tool_call_id`` is the caller's id of the call: a retry with the same id and arguments is answered with the first result. */
export interface ExternalCallParams {
  tool_call_id: string;
  name: string;
  arguments: Record<string, unknown>;
}

/** The tool result, as JSON text (an error is a result too, with its stable code); ``accepted`` is the mail a send_message put in the recipient's log; ``approval_id`` when an ``ask`` rule holds the call until the user answers. */
export interface ExternalCallResult {
  content: string;
  is_error: boolean;
  approval_id?: string | null;
  accepted?: ProducerAccepted | null;
}

/** The mail this call claimed: consumed by the connection's next session call, released if the connection ends first. */
export interface ExternalCheckMailResult {
  messages: Array<ExternalMail>;
}

/** A message as the client's model reads it: ``text`` is its envelope, rendered by the engine (``<agent_message from="...">`` and the rest, spec/envelope.md). */
export interface ExternalMail {
  message_id: string;
  owner: string;
  text: string;
}

/** ``external/mail``: the bound session has new mail; ``external.check_mail`` reads it. */
export interface ExternalMailNotification {
  session_id: string;
}

/** Another token for an existing external session (a lost one is revoked apart). */
export interface ExternalTokenIssueParams {
  session_id: string;
}

export interface ExternalTokenIssueResult {
  token: string;
  token_id: string;
}

/** A ExternalTokenIssued event. */
export interface ExternalTokenIssuedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ExternalTokenIssued";
  data: ExternalTokenIssuedData;
}

export interface ExternalTokenRevokeParams {
  token_id: string;
}

/** A ExternalTokenRevoked event. */
export interface ExternalTokenRevokedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ExternalTokenRevoked";
  data: ExternalTokenRevokedData;
}

export interface ExternalTokenView {
  token_id: string;
  session_id: string;
  root_session_id: string;
  handle: string | null;
  agent: string;
  revoked: boolean;
}

/** The tokens of one session, or of every external session. */
export interface ExternalTokensListParams {
  session_id?: string | null;
}

export interface ExternalTokensListResult {
  tokens: Array<ExternalTokenView>;
}

/** The tools the bound session's rules offer now (rules are read at each call). */
export interface ExternalToolsResult {
  tools: Array<string>;
}

/** ``auth_token``: no longer taken. The token never crosses the wire: a TCP connection proves it holds it with ``auth.challenge`` and ``auth.prove`` first; on TCP an ``auth_token`` is refused (``rpc:token_in_clear``), the Unix socket and stdio ignore it. */
export interface InitializeParams {
  protocol_version: number;
  client_info: ClientInfo;
  capabilities?: ClientCapabilities;
  auth_token?: string | null;
}

export interface InitializeResult {
  protocol_version: number;
  server_info: ServerInfo;
  capabilities: ServerCapabilities;
}

export interface MessageGetParams {
  message_id: string;
}

/** One lifecycle step of a message, as its recipient's log recorded it. */
export interface MessageHistoryEntry {
  seq: number;
  kind: string;
  run_id?: string | null;
  request_id?: string | null;
  reason?: string | null;
}

/** A page of the mail a session received (only its pending mail with ``pending_only``), in acceptance order: at most ``limit`` messages (1 to 256, default 256) and about 1 MiB of bodies (at least one message), after the cursor ``after`` (0: from the first; else a ``next`` a previous page gave). */
export interface MessageListParams {
  session_id: string;
  pending_only?: boolean;
  after?: number;
  limit?: number;
}

/** ``next``: the ``after`` of the next page; null when this page is the last. */
export interface MessageListResult {
  messages: Array<MessageView>;
  next: number | null;
}

export interface MessageReceipt {
  message: MessageView;
  history: Array<MessageHistoryEntry>;
}

export type MessageState = "accepted" | "admitted" | "claimed" | "consumed" | "discarded" | "released";

export interface MessageView {
  message_id: string;
  recipient: string;
  sender: string | null;
  owner: Owner;
  mode: Mode;
  state: MessageState;
  body: string;
  run_id: string | null;
  reason: string | null;
}

/** Requested delivery: join the in-flight run (steer) or wait for the next run (queue). */
export type Mode = "queue" | "steer";

/** A ModelOutput event. */
export interface ModelOutputEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ModelOutput";
  data: ModelOutputData;
}

/** A message without an ``id``: never answered. */
export interface NotificationFrame {
  jsonrpc: "2.0";
  method: string;
  params?: Record<string, unknown>;
}

/** Who produced a message. Only agent mail counts against a recipient's inbox cap. */
export type Owner = "agent" | "delegation" | "goal" | "plugin" | "user";

/** ``plugin/event``: every durable event, to connections that asked for plugin events. */
export interface PluginEventNotification {
  event: EventView;
}

/** Mail durably accepted (``ProducerMessageAccepted``). ``agent_hop`` is set for agent mail only: internal routing data, never shown in the envelope a model reads. */
export interface ProducerAccepted {
  message_id: string;
  session_id: string;
  owner: Owner;
  mode: Mode;
  recipient_state: RecipientState;
  agent_hop?: number | null;
}

/** A ProducerMessageAccepted event. */
export interface ProducerMessageAcceptedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ProducerMessageAccepted";
  data: ProducerMessageAcceptedData;
}

/** A ProducerMessageAdmitted event. */
export interface ProducerMessageAdmittedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ProducerMessageAdmitted";
  data: ProducerMessageAdmittedData;
}

/** A ProducerMessageClaimed event. */
export interface ProducerMessageClaimedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ProducerMessageClaimed";
  data: ProducerMessageClaimedData;
}

/** A ProducerMessageConsumed event. */
export interface ProducerMessageConsumedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ProducerMessageConsumed";
  data: ProducerMessageConsumedData;
}

/** A ProducerMessageDiscarded event. */
export interface ProducerMessageDiscardedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ProducerMessageDiscarded";
  data: ProducerMessageDiscardedData;
}

/** A ProducerMessageReleased event. */
export interface ProducerMessageReleasedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ProducerMessageReleased";
  data: ProducerMessageReleasedData;
}

/** Plugin-owned mail into any session; the body is capped at 256 KiB of UTF-8. ``idempotency_key``: as for ``run.submit``, in the plugins' key space of the session. */
export interface ProducerSendParams {
  session_id: string;
  body: string;
  idempotency_key?: string | null;
}

/** The recipient as the sender found it: running, waiting for a run, or finished. These are wire values of the send result, fixed by the contract, not session states: two of them happen to share a session state's spelling. */
export type RecipientState = "queued" | "running" | "waking_finished";

/** A RequestAborted event. */
export interface RequestAbortedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RequestAborted";
  data: RequestAbortedData;
}

/** A RequestBegun event. */
export interface RequestBegunEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RequestBegun";
  data: RequestBegunData;
}

/** A RequestCommitted event. */
export interface RequestCommittedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RequestCommitted";
  data: RequestCommittedData;
}

/** A request: answered with a response or an error response of the same ``id``. Params are by name; omitted, they are ``{}``. */
export interface RequestFrame {
  jsonrpc: "2.0";
  id: number | string;
  method: string;
  params?: Record<string, unknown>;
}

/** A request's result. */
export interface ResponseFrame {
  jsonrpc: "2.0";
  id: number | string;
  result: unknown;
}

/** A JSON-RPC error object; ``data.code`` is the stable treemail code. */
export interface RpcError {
  code: number;
  message: string;
  data?: ErrorData | null;
}

/** Cancel the session's run in flight (queued or running), as its user: the run ends interrupted with the reason "cancelled by user", mail it had claimed is released, and the session stays idle until new input. A delegated session's parent is told, as for any interrupted run. */
export interface RunCancelParams {
  session_id: string;
}

/** The run that was cancelled, as it ended. */
export interface RunCancelResult {
  run: RunView;
  session: SessionView;
}

/** A RunFinished event. */
export interface RunFinishedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RunFinished";
  data: RunFinishedData;
}

export interface RunGetParams {
  run_id: string;
}

/** A RunInterrupted event. */
export interface RunInterruptedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RunInterrupted";
  data: RunInterruptedData;
}

/** A page of a session's runs, in order: at most ``limit`` (1 to 256, default 256) after the cursor ``after`` (0: from the first; else a ``next`` a previous page gave). */
export interface RunListParams {
  session_id: string;
  after?: number;
  limit?: number;
}

/** ``next``: the ``after`` of the next page; null when this page is the last. */
export interface RunListResult {
  runs: Array<RunView>;
  next: number | null;
}

/** A RunQueued event. */
export interface RunQueuedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RunQueued";
  data: RunQueuedData;
}

/** A RunStarted event. */
export interface RunStartedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "RunStarted";
  data: RunStartedData;
}

export type RunState = "finished" | "interrupted" | "queued" | "running";

/** User steering: joins the session's in-flight run at its next safe boundary; with no run in flight it waits for the next run, like ``run.submit``. ``idempotency_key``: as for ``run.submit`` (one key space for the user's mail to a session: a key used by ``run.submit`` and then by ``run.steer`` is other mail, and refused). */
export interface RunSteerParams {
  session_id: string;
  text: string;
  idempotency_key?: string | null;
}

/** User input: mail for the session's next run (queue mode), which wakes it. ``idempotency_key``: optional, the client's key for this mail (printable, 1 to 256 bytes of UTF-8; a fresh UUID per mail is a good key). A retry with the same key and the same mail is answered with the first accept, and accepts nothing; the same key with other mail is refused (``producer:idempotency_conflict``). Keys are scoped by session and producer kind (user or plugin), and kept as long as the store. */
export interface RunSubmitParams {
  session_id: string;
  text: string;
  idempotency_key?: string | null;
}

export interface RunView {
  run_id: string;
  session_id: string;
  number: number;
  status: RunState;
  base_hop: number;
}

/** The sender asking (``session_id``) and the ``message_id`` its send_message returned. */
export interface SentMessageParams {
  session_id: string;
  message_id: string;
}

/** A sent message as its sender sees it: ``state`` is its lifecycle state, ``final`` once consumed or discarded; ``reason`` only for a discard (``cancelled by sender``, ``expired``, or an operator's). */
export interface SentMessageStatus {
  message_id: string;
  recipient_session_id: string;
  state: string;
  final: boolean;
  reason?: string | null;
}

export interface ServerCapabilities {
  methods: Array<string>;
  notifications: Array<string>;
  max_frame_bytes: number;
  max_in_flight: number;
  plugin_body_max_bytes: number;
}

export interface ServerInfo {
  name: string;
  version: string;
}

/** A new tree whose root runs ``agent`` (a known agent's name), or the agent that ``agent_doc`` (an agent doc's full text: YAML frontmatter and prompt) defines. ``agent_docs`` define more agents first, for the tree to delegate to; an agent doc replaces a daemon agent of the same name, except one a file of the data directory's ``agents/`` defines (``daemon:agent_defined_by_file``). ``task``, when given, is the root's first user input (as ``run.submit`` in queue mode), accepted in the same store transaction as the session: a refused task leaves no session behind. */
export type SessionCreateParams = {
  agent_docs?: Array<string>;
  task?: string | null;
} & ({ agent: string; agent_doc?: null; } | { agent?: null; agent_doc: string; });

/** A SessionCreated event. */
export interface SessionCreatedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "SessionCreated";
  data: SessionCreatedData;
}

export interface SessionDelegateParams {
  parent_session_id: string;
  agent: string;
  task: string;
}

/** A SessionForked event. */
export interface SessionForkedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "SessionForked";
  data: SessionForkedData;
}

export interface SessionGetParams {
  session_id: string;
}

/** A page of the sessions (of one tree when ``root_session_id`` is given), in creation order: at most ``limit`` (1 to 256, default 256) after the cursor ``after`` (0: from the first; else a ``next`` a previous page gave). */
export interface SessionListParams {
  root_session_id?: string | null;
  after?: number;
  limit?: number;
}

/** ``next``: the ``after`` of the next page; null when this page is the last. */
export interface SessionListResult {
  sessions: Array<SessionView>;
  next: number | null;
}

/** A SessionReverted event. */
export interface SessionRevertedEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "SessionReverted";
  data: SessionRevertedData;
}

export type SessionState = "finished" | "idle" | "queued" | "running";

export interface SessionView {
  session_id: string;
  root_session_id: string;
  parent_session_id: string | null;
  handle: string | null;
  agent: string;
  state: SessionState;
  run_id: string | null;
  live: boolean;
  resident?: boolean;
}

export interface ShutdownResult {
  shutting_down: boolean;
}

/** Run a tool as the session's in-flight run: the daemon executes, the caller's own model asked. ``tool_call_id`` is the caller's id of the call (a retry with the same id and arguments is answered with the first result). */
export interface ToolCallParams {
  session_id: string;
  tool_call_id: string;
  name: string;
  arguments: Record<string, unknown>;
}

/** The tool result the model should see (JSON text); ``approval_id`` when an ``ask`` rule holds the call until ``approval.answer``. ``accepted``: the mail a ``send_message`` call put in the recipient's log, as the daemon records it (with its internal ``agent_hop``, which the tool result the model sees leaves out). */
export interface ToolCallResult {
  content: string;
  approval_id?: string | null;
  accepted?: ProducerAccepted | null;
}

/** ``plugin/tool_before_call``: the server asks a gating plugin before a tool call runs. */
export interface ToolGateParams {
  session_id: string;
  agent: string;
  tool_call_id: string;
  name: string;
  arguments: unknown;
}

/** The plugin's verdict: ``allow`` false refuses the call with ``reason``. */
export interface ToolGateResult {
  allow: boolean;
  reason?: string;
}

/** A ToolResults event. */
export interface ToolResultsEvent {
  number: number;
  session_id: string;
  seq: number;
  kind: "ToolResults";
  data: ToolResultsData;
}

export interface Methods {
  "auth.challenge": { params: AuthChallengeParams; result: AuthChallengeResult };
  "auth.prove": { params: AuthProveParams; result: AuthProveResult };
  "initialize": { params: InitializeParams; result: InitializeResult };
  "shutdown": { params: Empty; result: ShutdownResult };
  "session.create": { params: SessionCreateParams; result: SessionView };
  "session.get": { params: SessionGetParams; result: SessionView };
  "session.list": { params: SessionListParams; result: SessionListResult };
  "session.delegate": { params: SessionDelegateParams; result: SessionView };
  "run.submit": { params: RunSubmitParams; result: ProducerAccepted };
  "run.steer": { params: RunSteerParams; result: ProducerAccepted };
  "run.cancel": { params: RunCancelParams; result: RunCancelResult };
  "run.get": { params: RunGetParams; result: RunView };
  "run.list": { params: RunListParams; result: RunListResult };
  "message.get": { params: MessageGetParams; result: MessageReceipt };
  "message.list": { params: MessageListParams; result: MessageListResult };
  "message.status": { params: SentMessageParams; result: SentMessageStatus };
  "message.cancel": { params: SentMessageParams; result: SentMessageStatus };
  "tool.call": { params: ToolCallParams; result: ToolCallResult };
  "approval.list": { params: ApprovalListParams; result: ApprovalListResult };
  "approval.answer": { params: ApprovalAnswerParams; result: ApprovalView };
  "events.subscribe": { params: EventsSubscribeParams; result: EventsSubscribeResult };
  "events.read": { params: EventsReadParams; result: EventsReadResult };
  "events.unsubscribe": { params: EventsUnsubscribeParams; result: EventsUnsubscribeResult };
  "plugin/producer/send": { params: ProducerSendParams; result: ProducerAccepted };
  "external.attach": { params: ExternalAttachParams; result: ExternalAttachResult };
  "external.tokens.issue": { params: ExternalTokenIssueParams; result: ExternalTokenIssueResult };
  "external.tokens.list": { params: ExternalTokensListParams; result: ExternalTokensListResult };
  "external.tokens.revoke": { params: ExternalTokenRevokeParams; result: ExternalTokenView };
  "external.bind": { params: ExternalBindParams; result: ExternalBindResult };
  "external.tools": { params: Empty; result: ExternalToolsResult };
  "external.check_mail": { params: Empty; result: ExternalCheckMailResult };
  "external.call": { params: ExternalCallParams; result: ExternalCallResult };
}

export interface Notifications {
  "events/event": { params: EventNotification; result: Empty };
  "plugin/event": { params: PluginEventNotification; result: Empty };
  "external/mail": { params: ExternalMailNotification; result: Empty };
}

export interface ServerRequests {
  "plugin/tool_before_call": { params: ToolGateParams; result: ToolGateResult };
}

/** A request frame of method M, its params typed. */
export type Request<M extends keyof Methods = keyof Methods> = {
  [K in M]: { jsonrpc: "2.0"; id: number | string; method: K; params: Methods[K]["params"] };
}[M];

/** The response to a request of method M, its result typed. */
export interface Response<M extends keyof Methods> {
  jsonrpc: "2.0";
  id: number | string;
  result: Methods[M]["result"];
}

/** A server notification of method M, its params typed. */
export type Notification<M extends keyof Notifications = keyof Notifications> = {
  [K in M]: { jsonrpc: "2.0"; method: K; params: Notifications[K]["params"] };
}[M];

/** A server request of method M (answered by plugins), its params typed. */
export type ServerRequest<M extends keyof ServerRequests = keyof ServerRequests> = {
  [K in M]: { jsonrpc: "2.0"; id: number | string; method: K;
              params: ServerRequests[K]["params"] };
}[M];

/** A session was created: a tree root (no parent) or a delegated child. */
export interface SessionCreatedData {
  root_session_id: string;
  parent_session_id: string | null;
  handle: string | null;
  agent: string;
  description?: string;
}

/** The session became a ghost: the branch created by session ``branch`` was reverted. */
export interface SessionRevertedData {
  branch: string;
}

/** The session is a fork: its conversation begins with ``source``'s log up to ``upto``. */
export interface SessionForkedData {
  from: string;
  upto: number;
}

/** A run is wanted and waits to start; ``reason`` says what woke the session. */
export interface RunQueuedData {
  run_id: string;
  run_number: number;
  reason: string;
}

/** The queued run started; mail waiting for the next run is bound to it. */
export interface RunStartedData {
  run_id: string;
  run_number: number;
}

/** The run completed its task. */
export interface RunFinishedData {
  run_id: string;
  run_number: number;
  reason: string;
}

/** The run was cancelled, failed, or was found dead at restart; ``reason`` says which. A model failure adds its HTTP ``status``, the ``endpoint`` called and a ``hint``. */
export interface RunInterruptedData {
  run_id: string;
  run_number: number;
  reason: string;
  status?: number | null;
  endpoint?: string | null;
  hint?: string | null;
}

/** A model request opened at a safe boundary and claimed ``message_ids``. */
export interface RequestBegunData {
  run_id: string;
  request_id: string;
  message_ids: Array<string>;
}

/** The request committed: the mail it claimed is consumed. */
export interface RequestCommittedData {
  run_id: string;
  request_id: string;
}

/** The request did not commit: the mail it claimed is released. */
export interface RequestAbortedData {
  run_id: string;
  request_id: string;
}

/** The model's reply to a committed request, with the mail texts it read. */
export interface ModelOutputData {
  run_id: string;
  request_id: string;
  inputs?: Array<string>;
  text?: string | null;
  tool_calls?: Array<{
  id: string;
  name: string;
  arguments: string;
}>;
}

/** The results of the tool calls of the run's last reply. */
export interface ToolResultsData {
  run_id: string;
  results: Array<{
  tool_call_id: string;
  content: string;
}>;
}

/** The delegated session reported its result to its parent, as message ``message_id``. */
export interface DelegationCompletedData {
  message_id: string;
}

/** A tool call is held by an ``ask`` rule until the user answers. */
export interface ApprovalRequestedData {
  approval_id: string;
  tool: string;
  label: string;
  tool_call_id: string;
  run_id: string;
}

/** The user answered a held call; ``outcome`` is the tool result the call produced. */
export interface ApprovalAnsweredData {
  approval_id: string;
  state: "pending" | "approved" | "denied";
  scope: string | null;
  outcome: {
  result?: Record<string, string> | null;
  error?: string | null;
  message?: string | null;
};
}

/** Mail was durably accepted into the recipient's log: the send has succeeded. ``agent_hop`` is the hop count of agent mail (None for any other owner). */
export interface ProducerMessageAcceptedData {
  message_id: string;
  owner: "agent" | "delegation" | "plugin" | "goal" | "user";
  sender: string | null;
  run_id: string | null;
  request_id: string | null;
  mode: "steer" | "queue";
  agent_hop: number | null;
  body: string;
}

/** The mail was taken into pending input, bound to the running run or the next one. */
export interface ProducerMessageAdmittedData {
  message_id: string;
  owner: "agent" | "delegation" | "plugin" | "goal" | "user";
  sender: string | null;
  run_id: string | null;
  request_id: string | null;
}

/** The mail was put into the model request ``request_id``. */
export interface ProducerMessageClaimedData {
  message_id: string;
  owner: "agent" | "delegation" | "plugin" | "goal" | "user";
  sender: string | null;
  run_id: string | null;
  request_id: string | null;
}

/** The request that claimed the mail did not commit; it waits for the next boundary. */
export interface ProducerMessageReleasedData {
  message_id: string;
  owner: "agent" | "delegation" | "plugin" | "goal" | "user";
  sender: string | null;
  run_id: string | null;
  request_id: string | null;
}

/** The request that carried the mail committed: the model read it, exactly once. */
export interface ProducerMessageConsumedData {
  message_id: string;
  owner: "agent" | "delegation" | "plugin" | "goal" | "user";
  sender: string | null;
  run_id: string | null;
  request_id: string | null;
}

/** The mail was dropped by an explicit decision, for ``reason``. */
export interface ProducerMessageDiscardedData {
  message_id: string;
  owner: "agent" | "delegation" | "plugin" | "goal" | "user";
  sender: string | null;
  run_id: string | null;
  request_id: string | null;
  reason: string;
}

/** A token now binds an MCP client to this external session. The store keeps only its SHA-256 ``digest`` (a token is 256 random bits: the digest reveals nothing usable), and ``token_id`` (the digest's first 16 hex digits) names it in listings. */
export interface ExternalTokenIssuedData {
  token_id: string;
  digest: string;
}

/** The token ``token_id`` of this external session was revoked: it binds no one now. */
export interface ExternalTokenRevokedData {
  token_id: string;
}

/** The data of a durable event, by its kind. */
export interface EventData {
  SessionCreated: SessionCreatedData;
  SessionReverted: SessionRevertedData;
  SessionForked: SessionForkedData;
  RunQueued: RunQueuedData;
  RunStarted: RunStartedData;
  RunFinished: RunFinishedData;
  RunInterrupted: RunInterruptedData;
  RequestBegun: RequestBegunData;
  RequestCommitted: RequestCommittedData;
  RequestAborted: RequestAbortedData;
  ModelOutput: ModelOutputData;
  ToolResults: ToolResultsData;
  DelegationCompleted: DelegationCompletedData;
  ApprovalRequested: ApprovalRequestedData;
  ApprovalAnswered: ApprovalAnsweredData;
  ProducerMessageAccepted: ProducerMessageAcceptedData;
  ProducerMessageAdmitted: ProducerMessageAdmittedData;
  ProducerMessageClaimed: ProducerMessageClaimedData;
  ProducerMessageReleased: ProducerMessageReleasedData;
  ProducerMessageConsumed: ProducerMessageConsumedData;
  ProducerMessageDiscarded: ProducerMessageDiscardedData;
  ExternalTokenIssued: ExternalTokenIssuedData;
  ExternalTokenRevoked: ExternalTokenRevokedData;
}
