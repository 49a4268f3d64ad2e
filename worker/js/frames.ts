/**
 * Frames and messages of docs/protocol.md, sections 2 and 3: a 4-byte big-endian
 * length, then that many bytes of UTF-8 JSON holding one JSON-RPC 2.0 message.
 *
 * The decoder is bounded and total (as worker/protocol/frames.py): fed any bytes it yields
 * messages or throws ProtocolError, and once it has thrown it stays failed, since
 * a stream that carried garbage cannot be trusted again.
 */

export const HEADER_BYTES = 4;
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024;

export const Code = {
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  TOOL_ERROR: -32000,
  INVALID_ARGUMENTS: -32001,
  NOT_FOUND: -32002,
  LOAD_ERROR: -32003,
  CANCELLED: -32004,
  LIMIT_EXCEEDED: -32005,
} as const;

const KIND_BY_CODE: Record<number, string> = {
  [-32000]: "tool_error",
  [-32001]: "invalid_arguments",
  [-32002]: "not_found",
  [-32003]: "load_error",
  [-32004]: "cancelled",
  [-32005]: "limit_exceeded",
};

export type Id = number | string;
export type Json = unknown;

export interface ErrorObject {
  code: number;
  message: string;
  data?: Json;
}

export type Message =
  | { kind: "request"; id: Id; method: string; params: Json }
  | { kind: "notification"; method: string; params: Json }
  | { kind: "response"; id: Id; result: Json }
  | { kind: "error"; id: Id | null; error: ErrorObject };

/** The peer sent something that is not the protocol (fatal to the connection). */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

/** An application error: `data` is ErrorData, the code's kind plus the evidence given (absent members omitted). */
export function errorObject(code: number, message: string, evidence: Record<string, unknown> = {}): ErrorObject {
  const data: Record<string, unknown> = { kind: KIND_BY_CODE[code] ?? "protocol_error" };
  for (const [key, value] of Object.entries(evidence)) {
    if (value !== undefined && value !== null) data[key] = value;
  }
  return { code, message, data };
}

const ALLOWED = new Set(["jsonrpc", "id", "method", "params", "result", "error"]);

export function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "int" : "float";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "string") return "str";
  return typeof value;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** One decoded body as a message, or ProtocolError (the rules of worker/protocol/messages.py `_classify`). */
export function classify(env: unknown): Message {
  if (!isObject(env)) throw new ProtocolError(`frame is not a JSON-RPC message: Expected \`object\`, got \`${typeName(env)}\``);
  for (const key of Object.keys(env)) {
    if (!ALLOWED.has(key)) throw new ProtocolError(`frame is not a JSON-RPC message: Object contains unknown field \`${key}\``);
  }
  const has = (key: string) => Object.prototype.hasOwnProperty.call(env, key);
  if (env.jsonrpc !== "2.0") throw new ProtocolError('message lacks "jsonrpc": "2.0"');
  const id = env.id;
  if (has("id") && id !== null && typeof id !== "string" && !(typeof id === "number" && Number.isInteger(id))) {
    throw new ProtocolError(`frame is not a JSON-RPC message: Expected \`int | str | null\`, got \`${typeName(id)}\` - at \`$.id\``);
  }
  if (has("method") && typeof env.method !== "string") {
    throw new ProtocolError(`frame is not a JSON-RPC message: Expected \`str\`, got \`${typeName(env.method)}\` - at \`$.method\``);
  }
  if (has("error")) checkErrorObject(env.error);
  if (has("method")) {
    if (has("result") || has("error")) throw new ProtocolError("a request cannot also carry result or error");
    const params = has("params") ? env.params : {};
    const method = env.method as string;
    if (!has("id")) return { kind: "notification", method, params };
    if (id === null) throw new ProtocolError("request id must be an integer or a string, not null");
    return { kind: "request", id: id as Id, method, params };
  }
  if (has("params")) throw new ProtocolError('"params" without "method"');
  if (has("result")) {
    if (has("error")) throw new ProtocolError('a response carries both "result" and "error"');
    if (!has("id") || id === null) throw new ProtocolError('a response with "result" needs an integer or string id');
    return { kind: "response", id: id as Id, result: env.result };
  }
  if (has("error")) {
    if (!has("id")) throw new ProtocolError('an error response needs an "id" (null is allowed)');
    return { kind: "error", id: id as Id | null, error: env.error as ErrorObject };
  }
  throw new ProtocolError('message has none of "method", "result" or "error"');
}

function checkErrorObject(error: unknown): void {
  const bad = (what: string) => {
    throw new ProtocolError(`frame is not a JSON-RPC message: ${what} - at \`$.error\``);
  };
  if (!isObject(error)) bad(`Expected \`object\`, got \`${typeName(error)}\``);
  const e = error as Record<string, unknown>;
  if (!("code" in e)) bad("Object missing required field `code`");
  if (!("message" in e)) bad("Object missing required field `message`");
  if (typeof e.code !== "number" || !Number.isInteger(e.code)) bad(`Expected \`int\`, got \`${typeName(e.code)}\``);
  if (typeof e.message !== "string") bad(`Expected \`str\`, got \`${typeName(e.message)}\``);
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** Incremental, bounded frame decoder; throws ProtocolError, and keeps throwing it once it has. */
export class FrameDecoder {
  private chunks: Uint8Array[] = [];
  private size = 0;
  private failed: ProtocolError | null = null;
  private eof = false;

  constructor(public maxFrameBytes: number = DEFAULT_MAX_FRAME_BYTES) {}

  /** Add bytes from the peer; an empty array means the stream ended. */
  receive(data: Uint8Array): void {
    if (this.failed) throw this.failed;
    if (data.length === 0) {
      this.eof = true;
      return;
    }
    this.chunks.push(data);
    this.size += data.length;
  }

  /** The next message, or null when more bytes are needed (or the stream ended cleanly between frames). */
  next(): Message | null {
    if (this.failed) throw this.failed;
    try {
      return this.take();
    } catch (exc) {
      this.failed = exc instanceof ProtocolError ? exc : new ProtocolError(`frame is not a JSON-RPC message: ${exc}`);
      throw this.failed;
    }
  }

  private take(): Message | null {
    if (this.size < HEADER_BYTES) {
      if (this.eof && this.size > 0) throw new ProtocolError(`stream ended inside a frame header (${this.size} of 4 bytes)`);
      return null;
    }
    const head = this.peek(HEADER_BYTES);
    const n = ((head[0] << 24) >>> 0) + (head[1] << 16) + (head[2] << 8) + head[3];
    // Checked as soon as the header is there, before a byte of the body is kept for it.
    if (n > this.maxFrameBytes) throw new ProtocolError(`frame announces ${n} bytes, over the ${this.maxFrameBytes}-byte limit`);
    if (this.size < HEADER_BYTES + n) {
      if (this.eof) throw new ProtocolError(`stream ended inside a frame (${this.size - HEADER_BYTES} of ${n} bytes)`);
      return null;
    }
    const frame = this.consume(HEADER_BYTES + n);
    let text: string;
    try {
      text = UTF8.decode(frame.subarray(HEADER_BYTES));
    } catch {
      throw new ProtocolError("frame is not a JSON-RPC message: its body is not valid UTF-8");
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (exc) {
      throw new ProtocolError(`frame is not a JSON-RPC message: ${(exc as Error).message ?? exc}`);
    }
    return classify(value);
  }

  private peek(n: number): Uint8Array {
    if (this.chunks[0].length < n) this.chunks = [concat(this.chunks, this.size)];
    return this.chunks[0].subarray(0, n);
  }

  private consume(n: number): Uint8Array {
    // Joined only once the whole frame is there: a large body costs one copy, not one per chunk.
    const whole = this.chunks.length === 1 ? this.chunks[0] : concat(this.chunks, this.size);
    const out = whole.subarray(0, n);
    const rest = whole.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.size = rest.length;
    return out;
  }
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

const LONE_SURROGATE = /(?<!\\)((?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/g;

/** A message as a frame: header + compact JSON (JSON.stringify throws for what JSON cannot carry). */
export function encodeFrame(message: Record<string, unknown>): Uint8Array {
  let text = JSON.stringify({ ...message, jsonrpc: "2.0" });
  // JSON.stringify writes a lone UTF-16 surrogate (a string cut between the two
  // halves of an emoji, say: routine in JS) as a \udXXX escape, which is not
  // UTF-8 and which the host's decoder rejects as a broken frame. It becomes
  // U+FFFD, as TextEncoder and Buffer do. Only lone surrogates are escaped so
  // (pairs are written as they are), and an escaped backslash before the `u`
  // (an even run of backslashes) is text, not an escape.
  if (text.includes("\\ud")) text = text.replace(LONE_SURROGATE, "$1\\ufffd");
  const body = Buffer.from(text, "utf8");
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  out.writeUInt32BE(body.length, 0);
  body.copy(out, HEADER_BYTES);
  return out;
}
