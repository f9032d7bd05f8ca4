// What a client of spec/bindings/protocol.ts relies on, type-checked by `just check-bindings`.
// Each `@ts-expect-error` line must fail to type-check: the bindings refuse what the wire does.
import {
  PROTOCOL_VERSION, WIRE_ERRORS, ErrorCode, ErrorData, EventView, Methods, Request, Response,
  SessionCreateParams, SessionView,
} from "../../spec/bindings/protocol";

export const version: 19 = PROTOCOL_VERSION;
export const invalidParams: -32602 = -32602;
export const text: string = WIRE_ERRORS[invalidParams];

// The event view narrows by kind: each kind's data is typed.
export function owner(event: EventView): string | null {
  if (event.kind === "ProducerMessageAccepted") {
    return event.data.owner;
  }
  if (event.kind === "RunInterrupted") {
    return event.data.hint ?? null;
  }
  return null;
}

// States are string-literal unions.
export function finished(session: SessionView): boolean {
  // @ts-expect-error not a session state
  if (session.state === "done") return true;
  return session.state === "finished";
}

// session.create takes exactly one of agent and agent_doc.
export const byName: SessionCreateParams = { agent: "lead" };
export const byDoc: SessionCreateParams = { agent_doc: "---\nname: x\n---\nhi", agent: null };
// @ts-expect-error neither
export const neither: SessionCreateParams = {};
// @ts-expect-error both
export const both: SessionCreateParams = { agent: "lead", agent_doc: "text" };

// Frames are typed per method.
export const get: Request<"session.get"> = {
  jsonrpc: "2.0", id: 1, method: "session.get", params: { session_id: "s" },
};
export function state(reply: Response<"session.get">): SessionView["state"] {
  return reply.result.state;
}
export const listParams: Methods["run.list"]["params"] = { session_id: "s", limit: 10 };

// error.data.code is one of the registry's codes.
export const known: ErrorCode = "rpc:invalid_params";
// @ts-expect-error not a registry code
export const unknown: ErrorData = { code: "nope:nope" };
