/**
 * The JavaScript worker (docs/protocol.md), run by Bun once the Python launch step
 * (worker/_runtime/handoff.py) has checked the host's `initialize`, entered the boundary
 * and applied the sandbox, and exec'd Bun in its place with the handoff in
 * XCSH_WORKER_INIT. This side answers `initialize` and serves everything after it.
 * The protocol's bookkeeping (ids, outstanding and unanswered requests, the
 * lifecycle, refusals) is the Connection's (connection.ts, as
 * worker/protocol/connection.py is the Python worker's): this file moves its
 * messages and frames, and serves the requests it hands over.
 *
 * Threads: the main thread runs tool code and everything else; the reader thread
 * (reader.ts) reads fd_in at all times and takes the lifeline on its own, since a
 * tool may busy-loop here. Requests are served one at a time, in arrival order;
 * `$/cancel`, `ui/changed` and answers to the worker's own requests are handled
 * as soon as the main thread's event loop gets them. A tool that never yields
 * (`for (;;) {}`) therefore sees neither `$/cancel` nor SIGTERM: the host kills
 * the boundary at the end of its grace period, as for any tool that ignores both.
 *
 * Tool code never ends the worker: while the worker runs, `process.exit` (and
 * `process.reallyExit`) throw a ProcessExit error into the code that called them,
 * which ends that call as a `tool_error` (or the load as a `load_error`). An
 * unhandled rejection or uncaught exception fails the running call (or load);
 * outside one it is a line on stderr, and the worker serves on. */
import * as fs from "node:fs";
import { type WorkerApi, makeApi } from "./api.ts";
import { Call, type CallDeps, FrameOverLimit, type Outcome, failure, startCall } from "./calls.ts";
import { Connection, type Event, LocalProtocolError, RemoteProtocolError } from "./connection.ts";
import { Code, DEFAULT_MAX_FRAME_BYTES, type ErrorObject, type Id, type Message, errorObject } from "./frames.ts";
import type { HostLink } from "./hostlink.ts";
import { leadsGroup, lifeline, say } from "./lifeline.ts";
import { type LoadedTool, WORKER_DIR, loadTools, toolRoot } from "./loader.ts";
import { quoted } from "./methods.ts";
import { registerPackages } from "./packages.ts";
import { ProcessExit, errorMessage, errorType } from "./results.ts";
import { handleRender, handleResolve, handleSession } from "./hooks.ts";
import { sessionOf } from "./session.ts";
import { setUndumpable } from "./undumpable.ts";

// Bun's process.exit ends in process.reallyExit: both are trapped for tool code
// (below), and both are put back for the worker's own exits.
const originalExit = process.exit;
const originalReallyExit = (process as any).reallyExit;
function realExit(code: number): never {
  (process as any).reallyExit = originalReallyExit;
  return originalExit.call(process, code);
}

// --- the handoff: read and forget it before any tool code can see it --------------
const rawInit = process.env.XCSH_WORKER_INIT;
delete process.env.XCSH_WORKER_INIT;
interface Init {
  id: Id;
  params: Record<string, any>;
  unenforced?: string[];
  supervisor?: number;
  fd_in: number;
  fd_out: number;
  kill_fd?: number;
  buffered?: string;
  typebox?: string;
}
let init: Init;
try {
  init = JSON.parse(rawInit ?? "");
  if (!Number.isInteger(init.fd_in) || !Number.isInteger(init.fd_out) || typeof init.params !== "object") throw new Error("fds");
} catch {
  say("usage: started by the xcsh-run host only (XCSH_WORKER_INIT is missing or malformed)");
  realExit(2);
}
// At contained and strict, as the Python worker is (docs/sandbox.md): exec made Bun dumpable again.
const SANDBOX = (init.params.sandbox ?? { level: "none" }) as { level?: string; best_effort?: boolean };
const UNDUMPABLE_FAILED = (SANDBOX.level ?? "contained") === "none" ? "" : setUndumpable();
// Bun.spawn without `env` passes the environment Bun started with (a snapshot that
// neither `delete process.env.X` nor unsetenv(3) reaches), handoff included: give
// it process.env instead, as node:child_process and Bun.$ already do. So a tool's
// child sees the environment the tool sees, with any change the tool made to it.
for (const name of ["spawn", "spawnSync"] as const) {
  const original = (Bun as any)[name];
  (Bun as any)[name] = function (this: unknown, first: any, second?: any) {
    // `env: undefined` given explicitly means the default too: it must not bring the snapshot back.
    if (Array.isArray(first)) return original.call(this, first, { ...second, env: second?.env ?? process.env });
    if (first !== null && typeof first === "object") return original.call(this, { ...first, env: first.env ?? process.env }, second);
    return original.call(this, first, second);
  };
}
const FD_OUT = init.fd_out;
const KILL_FD = Number.isInteger(init.kill_fd) ? (init.kill_fd as number) : -1;
const LEADER = leadsGroup();
const MAX_FRAME = Number(init.params.max_frame_bytes ?? DEFAULT_MAX_FRAME_BYTES);

// --- the connection (connection.ts: ids, outstanding and unanswered requests, the lifecycle) and its I/O
const conn = new Connection("worker", MAX_FRAME);
let hasUI = init.params.has_ui === true;
// The worker's own requests waiting for the host's answer, by the id the Connection gave them.
const waiters = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
const queue: { id: Id; method: string; params: Record<string, any> }[] = []; // host requests not served yet
let serving = false;
const cancels = new Map<string, string>(); // $/cancel for calls not running (yet)
let current: Call | null = null;
let onUnhandled: ((exc: unknown, how: string) => void) | null = null;
let tools = new Map<string, LoadedTool>();
let loaded = false;
let root: string | null = null;
let api: WorkerApi | null = null; // made at load, so that a broken tool API is that load's error
const NO_PENDING = { take: () => undefined };

function die(why: string): never {
  return lifeline(KILL_FD, LEADER, why, realExit);
}

/** Writes a whole frame; synchronous, so frames leave in the order they were made (an update before its answer). */
function write(frame: Uint8Array): void {
  let at = 0;
  while (at < frame.length) {
    try {
      at += fs.writeSync(FD_OUT, frame, at, frame.length - at);
    } catch (exc) {
      const code = (exc as NodeJS.ErrnoException).code;
      if (code === "EAGAIN" || code === "EINTR") continue;
      const why =
        code === "EPIPE"
          ? "the host is gone"
          : code === "EBADF"
            ? `fd ${FD_OUT} is no longer open in the worker: tool code closed it`
            : "the worker can no longer answer the host";
      die(`writing the response pipe failed (${code ?? exc}): ${why}`);
    }
  }
}

/** Throws what JSON.stringify throws for `params`, or FrameOverLimit, having written nothing. */
function notify(method: string, params: Record<string, unknown>): void {
  write(conn.sendNotification(method, params));
}

function reply(id: Id, outcome: Outcome): void {
  if ("error" in outcome) {
    write(conn.sendErrorObject(id, outcome.error));
    return;
  }
  let frame: Uint8Array;
  try {
    frame = conn.sendResult(id, outcome.result);
  } catch (exc) {
    if (exc instanceof LocalProtocolError) throw exc;
    const error =
      exc instanceof FrameOverLimit
        ? errorObject(
            Code.LIMIT_EXCEEDED,
            `the result ${exc.message}; return less data (or raise the host's max_frame_bytes)`,
            { limit: "output" },
          )
        : errorObject(
            Code.TOOL_ERROR,
            `the result's details are not JSON-serialisable: ${errorMessage(exc)}; return only plain objects, arrays, strings, numbers, booleans and null`,
          );
    frame = conn.sendErrorObject(id, error); // the result could not be framed: the request is still unanswered
  }
  write(frame);
}

const link: HostLink = {
  cwd: String(init.params.cwd ?? process.cwd()),
  hasUI: () => hasUI,
  currentCallId: () => (current !== null && !current.done ? current.callId : null),
  notify: (method, params) => notify(method, params),
  request(method, params): Promise<unknown> {
    const [id, frame] = conn.sendRequest(method, params);
    return new Promise((resolve, reject) => {
      waiters.set(id, { resolve, reject });
      write(frame);
    });
  },
};

const deps: CallDeps = {
  get toolRoot() {
    return root;
  },
  workerDir: WORKER_DIR,
  maxFrameBytes: MAX_FRAME,
  notify,
  currentCallId: () => link.currentCallId(),
};

// --- receiving ----------------------------------------------------------------------
function receive(msg: Message): void {
  let event: Event | null;
  conn.receiveMessage(msg);
  for (;;) {
    try {
      event = conn.nextEvent();
    } catch (exc) {
      if (exc instanceof RemoteProtocolError) die(`the host sent a malformed message: ${exc.message}`);
      throw exc;
    }
    if (event === null) return;
    handle(event);
  }
}

function handle(event: Event): void {
  switch (event.type) {
    case "RequestRefused":
      return write(event.reply);
    case "RequestReceived":
      queue.push({ id: event.id, method: event.method.name, params: event.params });
      void pump();
      return;
    case "NotificationReceived":
      if (event.method.name === "ui/changed") hasUI = event.params.has_ui;
      else if (event.method.name === "$/cancel") cancel(event.params.call_id, event.params.reason);
      return;
    case "NotificationDropped":
      return; // unknown notifications are ignored, as JSON-RPC allows
    case "ResultReceived":
    case "ErrorReceived": {
      const waiter = waiters.get(event.id)!; // the Connection answers only ids it gave out, once
      waiters.delete(event.id);
      if (event.type === "ErrorReceived") waiter.reject(new Error(`the host refused ui: ${event.error.message}`));
      else waiter.resolve(event.result);
    }
  }
}

function cancel(callId: string, reason: string): void {
  if (current !== null && current.callId === callId && !current.done) {
    current.abort(reason);
    return;
  }
  cancels.set(callId, reason);
}

// --- serving, one request at a time ---------------------------------------------------
async function pump(): Promise<void> {
  if (serving) return;
  serving = true;
  try {
    while (queue.length) {
      const req = queue.shift()!;
      let outcome: Outcome;
      try {
        outcome = await serve(req.method, req.params);
      } catch (exc) {
        outcome = { error: errorObject(Code.TOOL_ERROR, `the worker failed serving '${req.method}': ${errorType(exc)}: ${errorMessage(exc)}`) };
      }
      reply(req.id, outcome);
      if (req.method === "shutdown") realExit(0);
    }
  } finally {
    serving = false;
  }
}

let lastSession: string | null = null;

/** onSession({reason: "start"}) before a call of a session this worker did not serve last (session.ts, rule 4). */
async function startSession(params: Record<string, any>): Promise<void> {
  const session = sessionOf(params.ctx);
  if (session === null || session === lastSession) return;
  lastSession = session;
  const outcome = await handleSession({ event: { reason: "start", previousSessionFile: null }, ctx: params.ctx }, tools, deps);
  for (const warning of (outcome as any).result?.warnings ?? []) process.stderr.write(`xcsh-run: ${warning}\n`);
}

async function serve(method: string, params: Record<string, any>): Promise<Outcome> {
  switch (method) {
    case "load":
      return load(params);
    case "call":
      await startSession(params);
      return call(params);
    case "session":
      lastSession = sessionOf(params.ctx) ?? lastSession;
      return handleSession(params, tools, deps);
    case "render":
      return handleRender(params, tools, uiTheme());
    case "pending/resolve":
      return handleResolve(params, api?.pending ?? NO_PENDING);
    case "shutdown":
      return { result: null };
  }
  return { error: { code: Code.METHOD_NOT_FOUND, message: `unknown method ${quoted(method)}` } };
}

function uiTheme(): unknown {
  try {
    return (api?.api.ui as { theme?: unknown } | undefined)?.theme;
  } catch {
    return undefined;
  }
}

async function load(params: Record<string, any>): Promise<Outcome> {
  if (loaded) return { error: errorObject(Code.LOAD_ERROR, "this worker already loaded a module; start a new worker") };
  loaded = true;
  const path = String(params.path);
  root = toolRoot(path);
  try {
    api = makeApi(link, { typeboxDir: init.typebox ?? "" });
    registerPackages(api.api.pi as Record<string, unknown>, init.typebox ?? "");
  } catch (exc) {
    const message = `${path}: the worker's tool API could not be set up: ${errorType(exc)}: ${errorMessage(exc)}`;
    return { error: errorObject(Code.LOAD_ERROR, message, { traceback: exc instanceof Error ? exc.stack : undefined }) };
  }
  const toolApi = api.api;
  let unhandled!: (o: Outcome) => void;
  const failed = new Promise<Outcome>((resolve) => {
    unhandled = resolve;
  });
  let over = false; // answered already (a stray error failed the load): a late factory result must not count
  onUnhandled = (exc, how) =>
    unhandled({
      error: errorObject(Code.LOAD_ERROR, `${path}: ${how} while loading: ${errorType(exc)}: ${errorMessage(exc)}`, {
        traceback: exc instanceof Error ? exc.stack : undefined,
      }),
    });
  try {
    const done = loadTools(path, toolApi).then((value): Outcome => {
      if (over) return { error: errorObject(Code.LOAD_ERROR, "superseded") };
      if ("code" in value) return { error: value as ErrorObject };
      tools = value.tools;
      return { result: value.result }; // LOADED once this result is sent (methods.ts: load's onResult)
    });
    return await Promise.race([done, failed]);
  } finally {
    over = true;
    onUnhandled = null;
  }
}

async function call(params: Record<string, any>): Promise<Outcome> {
  const tool = tools.get(params.tool);
  if (tool === undefined) return { error: errorObject(Code.NOT_FOUND, `this worker has no tool named '${params.tool}'`) };
  const running = new Call(params.call_id);
  current = running;
  const early = cancels.get(running.callId);
  cancels.delete(running.callId);
  // A kept cancel whose call is not queued is for a call already answered: forget it.
  const queued = new Set(queue.filter((r) => r.method === "call").map((r) => r.params.call_id));
  for (const id of cancels.keys()) if (!queued.has(id)) cancels.delete(id);
  if (early !== undefined) running.abort(early);
  onUnhandled = (exc, how) => running.finish(failure(exc, tool, deps, `${how} while the call ran; await or catch every promise`));
  try {
    return await startCall(running, tool, params, deps);
  } finally {
    onUnhandled = null;
    current = null;
    try {
      api?.endCall(running.callId);
    } catch (exc) {
      say(`ending call ${running.callId} failed: ${errorMessage(exc)}`);
    }
  }
}

// --- signals, exits and stray errors ------------------------------------------------
process.on("SIGINT", () => {}); // the host owns cancellation: a Ctrl-C meant for it must not stop a tool
process.on("SIGTERM", () => {
  const running = current;
  if (running === null || running.done) realExit(0); // idle: the host is stopping this worker
  if (running.controller.signal.aborted || running.terminating !== null) return;
  // The host writes $/cancel (with the reason) before SIGTERM; the reader may not
  // have handed it over yet, so wait a little for it before using "terminated".
  running.terminating = setTimeout(() => running.abort(running.reason ?? "terminated"), 100);
});
const trap = (code?: unknown): never => {
  throw new ProcessExit(code ?? 0);
};
(process as any).exit = trap;
(process as any).reallyExit = trap;
function stray(how: string) {
  return (exc: unknown): void => {
    if (onUnhandled !== null) return onUnhandled(exc, how);
    say(`${how} outside any call (ignored): ${exc instanceof Error ? exc.stack : errorMessage(exc)}`);
  };
}
process.on("uncaughtException", stray("an uncaught exception"));
process.on("unhandledRejection", stray("an unhandled promise rejection"));

// --- start: the reader, the answer to initialize, the API ---------------------------
const reader = new Worker(new URL("./reader.ts", import.meta.url).href, {
  workerData: {
    fdIn: init.fd_in,
    killFd: KILL_FD,
    leader: LEADER,
    maxFrameBytes: MAX_FRAME,
    buffered: Buffer.from(init.buffered ?? "", "base64"),
  },
} as WorkerOptions);
reader.onmessage = (event: MessageEvent) => {
  for (const msg of event.data as Message[]) receive(msg);
};
reader.onerror = (event) => die(`the reader thread failed: ${(event as ErrorEvent).message}`);

// The handoff checked the host's initialize; the Connection takes it as received, so its answer moves it to READY.
conn.receiveMessage({ kind: "request", id: init.id, method: "initialize", params: init.params });
if (conn.nextEvent()?.type !== "RequestReceived") die("the worker's connection did not take the host's initialize");
const unenforced = [...(init.unenforced ?? [])];
if (UNDUMPABLE_FAILED) {
  if (!SANDBOX.best_effort) {
    const message = `sandbox not applied: undumpable: ${UNDUMPABLE_FAILED}`;
    write(conn.sendErrorObject(init.id, { code: -32007, message }));
    say(message);
    realExit(3);
  }
  unenforced.push(`undumpable: ${UNDUMPABLE_FAILED}`);
}
write(
  conn.sendResult(init.id, {
    protocol_version: 1,
    pid: process.pid,
    python: `bun ${Bun.version}`,
    unenforced,
    supervisor: init.supervisor ?? 0,
  }),
);
