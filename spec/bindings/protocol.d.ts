// Generated from protocol.schema.json by `just write-bindings`; do not edit.

export declare const PROTOCOL_VERSION: 19;

export interface ApprovalAnswerParams {
  approval_id: string;
  approve: boolean;
  scope?: "once" | "session" | "tree";
}

export interface ApprovalListParams {
  pending_only?: boolean;
}

export interface ApprovalListResult {
  approvals: Array<ApprovalView>;
}

export interface ApprovalView {
  approval_id: string;
  session_id: string;
  run_id: string;
  tool_call_id: string;
  tool: string;
  arguments: Record<string, unknown>;
  label: string;
  state: string;
  scope: string | null;
  outcome: string | null;
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

/** No params. */
export interface Empty {
}

/** ``events/event``: the next event of a subscription. */
export interface EventNotification {
  subscription_id: string;
  event: EventView;
}

/** One durable event: ``number`` is its place in the global feed, ``seq`` in its session's log. */
export interface EventView {
  number: number;
  session_id: string;
  seq: number;
  kind: string;
  data: Record<string, unknown>;
}

/** A page of the feed after ``after`` (at most ``limit`` events, at most 256), only ``session_id``'s when given; ``next`` is where the next page starts. */
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

export interface ExternalTokenRevokeParams {
  token_id: string;
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

export interface MessageView {
  message_id: string;
  recipient: string;
  sender: string | null;
  owner: string;
  mode: string;
  state: string;
  body: string;
  run_id: string | null;
  reason: string | null;
}

/** ``plugin/event``: every durable event, to connections that asked for plugin events. */
export interface PluginEventNotification {
  event: EventView;
}

/** Mail durably accepted (``ProducerMessageAccepted``). ``agent_hop`` is set for agent mail only: internal routing data, never shown in the envelope a model reads. */
export interface ProducerAccepted {
  message_id: string;
  session_id: string;
  owner: string;
  mode: string;
  recipient_state: string;
  agent_hop?: number | null;
}

/** Plugin-owned mail into any session; the body is capped at 256 KiB of UTF-8. ``idempotency_key``: as for ``run.submit``, in the plugins' key space of the session. */
export interface ProducerSendParams {
  session_id: string;
  body: string;
  idempotency_key?: string | null;
}

export interface RunGetParams {
  run_id: string;
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
  status: string;
  base_hop: number;
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

/** A new tree whose root runs ``agent`` (a known agent's name), or the agent that ``agent_doc`` (an agent doc's full text: YAML frontmatter and prompt) defines. ``agent_docs`` define more agents first, for the tree to delegate to; an agent doc replaces a daemon agent of the same name, except one a file of the data directory's ``agents/`` defines (``daemon:agent_defined_by_file``). */
export interface SessionCreateParams {
  agent?: string | null;
  agent_doc?: string | null;
  agent_docs?: Array<string>;
}

export interface SessionDelegateParams {
  parent_session_id: string;
  agent: string;
  task: string;
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

export interface SessionView {
  session_id: string;
  root_session_id: string;
  parent_session_id: string | null;
  handle: string | null;
  agent: string;
  state: string;
  run_id: string | null;
  live: boolean;
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
  "run.get": { params: RunGetParams; result: RunView };
  "run.list": { params: RunListParams; result: RunListResult };
  "message.get": { params: MessageGetParams; result: MessageReceipt };
  "message.list": { params: MessageListParams; result: MessageListResult };
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
