/**
 * The worker's side of the JSON-RPC connection, as a state machine with no I/O
 * (worker/protocol/connection.py, whose names, events and rules it keeps where
 * they apply). main.ts hands it every message the reader thread decoded and
 * writes the frames it returns, in the order it returned them. It owns the
 * request ids, our outstanding requests, the host's unanswered ones and the
 * lifecycle (`State`), through the method table (methods.ts).
 *
 * Bytes are not its business: the reader thread (reader.ts) splits and decodes
 * frames and takes the lifeline on a broken or ended stream, so neither the
 * end of the stream (`ConnectionClosed`) nor `abandon`/`close` exists here.
 *
 * Rules:
 *
 * 1. Every request sent ends in exactly one ResultReceived or ErrorReceived.
 *    A second answer to the same id, or an answer to an id never sent, is a
 *    RemoteProtocolError.
 * 2. Every RequestReceived is answered exactly once, through `sendResult` or
 *    `sendErrorObject`. A request the table does not allow (an unknown method,
 *    one this side sends, one out of state, malformed params, or a duplicate
 *    of an unanswered id) is not an event to answer: it comes out as
 *    RequestRefused with its error reply ready to write (no `data`, and not
 *    bounded by the frame limit: a refusal is small), and the connection stays
 *    usable.
 * 3. A host notification whose params do not fit is a RemoteProtocolError; an
 *    unknown one, or one out of state, is NotificationDropped (JSON-RPC allows it).
 * 4. Nothing throws but LocalProtocolError (this side's bug: a method this
 *    side does not send, one out of state, an id that is not unanswered), what
 *    framing throws for a payload (FrameOverLimit, or JSON.stringify's error),
 *    neither of which changes anything, and RemoteProtocolError (the host's),
 *    which moves to ERROR for good: every later `receiveMessage`/`nextEvent`
 *    throws it again.
 * 5. An error answer always goes out: one whose message or traceback would not
 *    fit in a frame is cut down until it does (main.ts's answers carry the
 *    tool's own text, which may be any size).
 */
import { FrameOverLimit } from "./calls.ts";
import { Code, DEFAULT_MAX_FRAME_BYTES, type ErrorObject, type Id, type Message, encodeFrame } from "./frames.ts";
import { type Method, type Notice, NOTICES, REQUESTS, type Role, State, checkParams, quoted } from "./methods.ts";

/** Why a request was refused (worker/protocol/messages.py `RefusalReason`), with its JSON-RPC code. */
export enum RefusalReason {
  UNKNOWN_METHOD = "unknown_method",
  DUPLICATE_ID = "duplicate_id",
  OUT_OF_STATE = "out_of_state",
  BAD_PARAMS = "bad_params",
}

const REFUSAL_CODES: Record<RefusalReason, number> = {
  [RefusalReason.UNKNOWN_METHOD]: Code.METHOD_NOT_FOUND,
  [RefusalReason.DUPLICATE_ID]: Code.INVALID_REQUEST,
  [RefusalReason.OUT_OF_STATE]: Code.INVALID_REQUEST,
  [RefusalReason.BAD_PARAMS]: Code.INVALID_PARAMS,
};

/** This side tried to send something the protocol does not allow. */
export class LocalProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LocalProtocolError";
  }
}

/** The host sent a message that is not the protocol. */
export class RemoteProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RemoteProtocolError";
  }
}

/** The events of worker/protocol/events.py that a connection fed whole messages can produce. */
export type Event =
  | { type: "RequestReceived"; id: Id; method: Method; params: Record<string, any> }
  | { type: "NotificationReceived"; method: Notice; params: Record<string, any> }
  | { type: "ResultReceived"; id: number; method: Method; result: unknown }
  | { type: "ErrorReceived"; id: number; method: Method; error: ErrorObject }
  | { type: "RequestRefused"; id: Id; methodName: string; error: ErrorObject; reply: Uint8Array; reason: RefusalReason }
  | { type: "NotificationDropped"; methodName: string; reason: string };

const CUT = 2048;

export class Connection {
  private _state: State = State.AWAITING_INIT;
  private lastId = 0;
  private readonly _outstanding = new Map<number, Method>();
  private readonly _unanswered = new Map<Id, Method>();
  private readonly inbox: Message[] = [];
  private error: RemoteProtocolError | null = null;

  constructor(
    readonly role: Role,
    readonly maxFrameBytes: number = DEFAULT_MAX_FRAME_BYTES,
  ) {}

  get state(): State {
    return this._state;
  }

  /** Ids of our requests not answered yet. */
  get outstanding(): number[] {
    return [...this._outstanding.keys()];
  }

  /** Ids of the host's requests we have not answered yet. */
  get unanswered(): Id[] {
    return [...this._unanswered.keys()];
  }

  // --- sending ---------------------------------------------------------------------

  /** Register a request of ours and return its id and frame. Ids are 1, 2, 3, ... */
  sendRequest(name: string, params: Record<string, unknown>): [number, Uint8Array] {
    const method = this.checkSend(REQUESTS[name], name, "Method");
    const id = this.lastId + 1;
    const frame = this.frame({ id, method: name, params });
    this.lastId = id; // only now: a request that could not be framed took no id
    this._outstanding.set(id, method);
    this.advance(method.onRequest);
    return [id, frame];
  }

  sendNotification(name: string, params: Record<string, unknown>): Uint8Array {
    const notice = this.checkSend(NOTICES[name], name, "Notice");
    const frame = this.frame({ method: name, params });
    this.advance(notice.onReceive);
    return frame;
  }

  /** Answer the host's request `id` with `result`; throws (changing nothing) when it cannot be framed. */
  sendResult(id: Id, result: unknown): Uint8Array {
    const method = this.answering(id);
    const frame = this.frame({ id, result });
    this._unanswered.delete(id);
    this.advance(method.onResult);
    return frame;
  }

  /** Answer the host's request `id` with this exact error object, cut down to fit a frame if need be. */
  sendErrorObject(id: Id, error: ErrorObject): Uint8Array {
    this.answering(id);
    const frame = this.errorFrame(id, error);
    this._unanswered.delete(id);
    return frame;
  }

  // --- receiving -------------------------------------------------------------------

  /** A whole message from the host (the reader thread decoded it). */
  receiveMessage(message: Message): void {
    if (this.error !== null) throw this.error;
    this.inbox.push(message);
  }

  /** The next event, or null when it needs another message (connection.py's NEED_DATA); throws RemoteProtocolError. */
  nextEvent(): Event | null {
    if (this.error !== null) throw this.error;
    for (;;) {
      const message = this.inbox.shift();
      if (message === undefined) return null;
      let event: Event | null;
      try {
        event = this.handle(message);
      } catch (exc) {
        if (exc instanceof RemoteProtocolError) {
          this.error = exc;
          this._state = State.ERROR;
        }
        throw exc;
      }
      if (event !== null) return event;
    }
  }

  // --- internals -------------------------------------------------------------------

  private checkSend<T extends Method | Notice>(what: T | undefined, name: string, kind: "Method" | "Notice"): T {
    const shown = `${kind} ${quoted(name)}`;
    if (what === undefined) throw new LocalProtocolError(`<${shown}> is not in this connection's method table`);
    if (what.sender !== this.role) {
      throw new LocalProtocolError(`<${shown}> is sent by the ${what.sender}, and this side is the ${this.role}`);
    }
    if (!what.allowed.includes(this._state)) {
      throw new LocalProtocolError(`cannot send <${shown}> while the connection is ${State[this._state]}`);
    }
    return what;
  }

  /** Encodes a message, throwing what JSON.stringify throws, or FrameOverLimit. */
  private frame(message: Record<string, unknown>): Uint8Array {
    const frame = encodeFrame(message);
    if (frame.length - 4 > this.maxFrameBytes) throw new FrameOverLimit(frame.length - 4, this.maxFrameBytes);
    return frame;
  }

  private errorFrame(id: Id, error: ErrorObject): Uint8Array {
    const frame = encodeFrame({ id, error });
    if (frame.length - 4 <= this.maxFrameBytes) return frame;
    const cut = (text: unknown) => (typeof text === "string" && text.length > CUT ? `${text.slice(0, CUT)}... (cut to fit the frame limit)` : text);
    const data = error.data as Record<string, unknown> | undefined;
    const small = { ...error, message: cut(error.message) as string, data: data && { ...data, traceback: cut(data.traceback) } };
    const again = encodeFrame({ id, error: small });
    if (again.length - 4 <= this.maxFrameBytes) return again;
    return encodeFrame({ id, error: { code: error.code, message: "the error was too large to send" } });
  }

  private answering(id: Id): Method {
    const method = this._unanswered.get(id);
    if (method === undefined) throw new LocalProtocolError(`no unanswered request with id ${JSON.stringify(id)}`);
    return method;
  }

  private advance(target: State | null): void {
    if (target !== null && target > this._state) this._state = target;
  }

  private handle(msg: Message): Event | null {
    if (msg.kind === "request") return this.onRequest(msg.id, msg.method, msg.params);
    if (msg.kind === "notification") return this.onNotification(msg.method, msg.params);
    return this.onAnswer(msg);
  }

  private onRequest(id: Id, name: string, params: unknown): Event {
    const method = REQUESTS[name];
    if (method === undefined || method.sender === this.role) return this.refuse(id, name, RefusalReason.UNKNOWN_METHOD, `unknown method ${quoted(name)}`);
    if (this._unanswered.has(id)) return this.refuse(id, name, RefusalReason.DUPLICATE_ID, `request id ${JSON.stringify(id)} is already in use`);
    if (!method.allowed.includes(this._state)) {
      const why = `${quoted(name)} is not allowed while the connection is ${State[this._state]}`;
      return this.refuse(id, name, RefusalReason.OUT_OF_STATE, why);
    }
    const why = checkParams(name, params);
    if (why !== null) return this.refuse(id, name, RefusalReason.BAD_PARAMS, `bad ${name} params: ${why}`);
    this._unanswered.set(id, method);
    this.advance(method.onRequest);
    return { type: "RequestReceived", id, method, params: params as Record<string, any> };
  }

  private refuse(id: Id, methodName: string, reason: RefusalReason, message: string): Event {
    const error = { code: REFUSAL_CODES[reason], message };
    return { type: "RequestRefused", id, methodName, error, reply: encodeFrame({ id, error }), reason };
  }

  private onNotification(name: string, params: unknown): Event {
    const notice = NOTICES[name];
    if (notice === undefined || notice.sender === this.role) return { type: "NotificationDropped", methodName: name, reason: "unknown notification" };
    if (!notice.allowed.includes(this._state)) {
      return { type: "NotificationDropped", methodName: name, reason: `not allowed while ${State[this._state]}` };
    }
    const why = checkParams(name, params);
    if (why !== null) {
      if (notice.lenient) return { type: "NotificationDropped", methodName: name, reason: `bad params: ${why}` };
      throw new RemoteProtocolError(`malformed ${quoted(name)} message: ${why}`);
    }
    this.advance(notice.onReceive);
    return { type: "NotificationReceived", method: notice, params: params as Record<string, any> };
  }

  private onAnswer(msg: Extract<Message, { kind: "response" | "error" }>): Event {
    const rid = msg.id;
    const method = typeof rid === "number" ? this._outstanding.get(rid) : undefined;
    if (method === undefined) {
      if (typeof rid === "number" && rid > 0 && rid <= this.lastId) throw new RemoteProtocolError(`a second answer to request ${rid}`);
      throw new RemoteProtocolError(`response to a request id the ${this.role} never sent: ${JSON.stringify(rid)}`);
    }
    const id = rid as number;
    this._outstanding.delete(id);
    if (msg.kind === "error") return { type: "ErrorReceived", id, method, error: msg.error };
    this.advance(method.onResult);
    return { type: "ResultReceived", id, method, result: msg.result };
  }
}
