/**
 * One `call`: its AbortController, its `ctx`, `onUpdate`, and running `execute`
 * to an outcome (docs/protocol.md, "call and update", section 7).
 *
 * A call ends at the first of: `execute` settling, its signal aborting (a
 * `$/cancel`, or SIGTERM), or an unhandled rejection / uncaught exception while
 * it runs. On abort the answer is `cancelled` at once: a tool that ignores its
 * signal is left running, and the host kills the boundary after its grace period.
 */
import { isExtensionTool } from "./extension.ts";
import { splitState } from "./session.ts";
import { Code, type ErrorObject, errorObject } from "./frames.ts";
import type { LoadedTool } from "./loader.ts";
import {
  type CallResult,
  ProcessExit,
  ResultError,
  errorMessage,
  evidence,
  limitHit,
  normalizeResult,
  short,
  traceback,
} from "./results.ts";

export type Outcome = { result: unknown } | { error: ErrorObject };

/** What a call needs from the connection (main.ts). */
export interface CallDeps {
  toolRoot: string | null;
  workerDir: string;
  maxFrameBytes: number;
  /** Writes one notification frame; throws for params JSON cannot carry or a frame over the limit. */
  notify(method: string, params: Record<string, unknown>): void;
  currentCallId(): string | null;
}

export class Call {
  readonly controller = new AbortController();
  reason: string | null = null;
  done = false;
  terminating: ReturnType<typeof setTimeout> | null = null;
  readonly finished: Promise<Outcome>;
  private settle!: (outcome: Outcome) => void;

  constructor(readonly callId: string) {
    this.finished = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  /** The first outcome wins; later ones (a tool settling after its cancel) are dropped. */
  finish(outcome: Outcome): void {
    if (this.done) return;
    this.done = true;
    if (this.terminating !== null) clearTimeout(this.terminating);
    this.settle(outcome);
  }

  abort(reason: string): void {
    if (this.controller.signal.aborted) return;
    this.reason = reason;
    this.finish({ error: errorObject(Code.CANCELLED, `cancelled: ${reason}`) });
    // A DOMException named AbortError, as fetch and Bun.spawn use (so `err.name === "AbortError"`
    // checks work): `signal.reason.message` is the reason ("timeout", "cancelled", ...).
    this.controller.abort(new DOMException(reason, "AbortError"));
  }
}

/** `ctx` for execute and onSession: the host's shared state (a snapshot, read-only) plus the original's methods. */
export function makeCtx(state: Record<string, unknown>, callId: string | null, deps: CallDeps): Record<string, unknown> {
  const [shared, sessionManager] = splitState(state);
  const ctx = {
    ...shared,
    abort(reason: string = "aborted by the tool"): void {
      deps.notify("abort", { call_id: callId, reason: String(reason) });
    },
    isIdle: (): boolean => deps.currentCallId() === null,
    hasQueuedMessages: (): boolean => false,
  };
  // Not enumerable: the ctx's own keys stay the shared state, as Python's ctx.state.
  Object.defineProperty(ctx, "sessionManager", { value: sessionManager, enumerable: false });
  return Object.freeze(ctx);
}

/** A thrown value as the call's error outcome: `limit_exceeded` for a sandbox limit, else `tool_error` with evidence. */
export function failure(exc: unknown, tool: LoadedTool | null, deps: CallDeps, how = ""): Outcome {
  let message = exc instanceof ProcessExit ? `the tool called process.exit(${short(exc.exitCode)})` : errorMessage(exc);
  if (how) message += ` (${how})`;
  const limit = limitHit(exc);
  if (limit !== null) {
    const type = exc instanceof Error ? exc.constructor.name : typeof exc;
    return { error: errorObject(Code.LIMIT_EXCEEDED, `${limit} limit exceeded: ${type}: ${message}`, { limit, traceback: traceback(exc) }) };
  }
  const ev = evidence(exc, tool?.expected ?? [], deps.toolRoot, deps.workerDir);
  return { error: errorObject(Code.TOOL_ERROR, message, { traceback: traceback(exc), ...ev }) };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Runs `execute` for a call made current by the caller; resolves once the call has its outcome. */
export function startCall(call: Call, tool: LoadedTool, params: Record<string, any>, deps: CallDeps): Promise<Outcome> {
  const args = params.arguments;
  if (!isPlainObject(args)) {
    const got = args === null ? "null" : Array.isArray(args) ? "array" : typeof args;
    call.finish({
      error: errorObject(Code.INVALID_ARGUMENTS, `invalid arguments for '${params.tool}': Expected \`object\`, got \`${got}\``, { path: "$" }),
    });
    return call.finished;
  }
  if (call.controller.signal.aborted) return call.finished; // cancelled before it started: execute never runs

  const onUpdate = (partial: unknown): void => {
    if (call.done) return; // answered already (cancelled): the host no longer waits for it
    const update: CallResult = normalizeResult(partial, "onUpdate()'s partial result");
    try {
      deps.notify("update", { call_id: call.callId, partial: update });
    } catch (exc) {
      if (exc instanceof FrameOverLimit) throw new RangeError(`onUpdate()'s partial result ${exc.message}`);
      throw new TypeError(`onUpdate()'s details are not JSON-serialisable: ${errorMessage(exc)}; send only plain objects, arrays, strings, numbers, booleans and null`);
    }
  };
  const ctx = makeCtx(isPlainObject(params.ctx) ? params.ctx : {}, call.callId, deps);
  (async () => {
    try {
      const signal = call.controller.signal;
      const value = await (isExtensionTool(tool.tool)
        ? tool.tool.execute(call.callId, args, signal, onUpdate, ctx) // pi.registerTool's order
        : tool.tool.execute(call.callId, args, onUpdate, ctx, signal));
      if (call.done) return;
      call.finish({ result: normalizeResult(value) });
    } catch (exc) {
      if (call.done) return;
      if (exc instanceof ResultError) {
        call.finish({ error: errorObject(Code.TOOL_ERROR, exc.message, evidence(exc, [], null, deps.workerDir)) });
      } else {
        call.finish(failure(exc, tool, deps));
      }
    }
  })();
  return call.finished;
}

/** A frame that would be over max_frame_bytes; nothing was written. */
export class FrameOverLimit extends Error {
  constructor(
    readonly size: number,
    readonly limit: number,
  ) {
    super(`is ${amount(size)}, over the ${amount(limit)} frame limit`);
    this.name = "FrameOverLimit";
  }
}

function amount(bytes: number): string {
  return bytes >= 2 ** 20 ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : `${bytes} bytes`;
}
