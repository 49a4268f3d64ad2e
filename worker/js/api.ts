/**
 * The tool API given to every factory of a Bun worker (the original's
 * `CustomToolAPI`): `cwd`, `exec`, `ui`, `hasUI`, `logger`, `typebox`, `pi`,
 * `pushPendingAction`. One object per worker, shared by every factory it loads
 * and kept in tools' closures, as the Python worker's `api` (worker/_tool_api/api.py).
 * Everything that reaches the host goes through the HostLink seam.
 *
 * What differs from the original, and why:
 * - `exec` (exec.ts) also takes `env` and `input`, kills the whole tree, and
 *   reports `code = -N` for a program ended by signal N (the original said 0).
 * - `ui.getEditorText()` returns a Promise of the text while a UI is attached
 *   (the host answers over the pipe); without one it returns "" at once, as
 *   the original's no-op UI. `ui.custom()` always resolves to undefined: a TUI
 *   component cannot cross the process boundary. `ui.theme` is a plain-text
 *   theme: every method returns its text argument unstyled.
 * - `logger` sends records to the host's log (at most 1000 records or 256 Ki
 *   characters per call), never to a file or the tool's stderr.
 * - `typebox` is loaded on first use, so tools without it load when TypeBox is
 *   not installed; then using it throws an Error that says how to install it.
 * - `pushPendingAction` returns the action's id and keeps `details`, which the
 *   host shows with the preview (the original dropped them).
 * - Added, as the Python worker has them: `ui.elicit(message, schema)` (an MCP
 *   form; `{action: "cancel", content: null}` without a UI) and
 *   `api.sample(messages, options?)` (a completion from the host's MCP client).
 *
 * - `zod` and `arktype` (on the api and on `pi`, as later versions give them)
 *   are the modules installed beside TypeBox, loaded on first use; without
 *   them, using one throws an Error that says how to install it.
 * - `events`: an event bus of this worker's tools (`on` returns the
 *   unsubscribe); a handler that throws is logged, the others still run.
 *
 * The `pi` namespace. The original injects the whole agent package
 * (`@oh-my-pi/pi-coding-agent`). Here it holds what means something outside
 * the agent:
 * - `ToolError`: a deliberate failure (`tool_error` with `deliberate: true`,
 *   which `xcsh-run fuzz` does not count as a bug).
 * - `Type`: TypeBox's `Type` builder (loaded on first use).
 * - `StringEnum(values, {description?, default?})`: a string enum schema
 *   (`{type: "string", enum: [...]}`), as the agent's AI package defines it.
 * - `logger`, `events`, `zod`, `arktype`: the same as the api's.
 * - The TUI components renderers use, drawing plain text (tui.ts): `Text`,
 *   `TruncatedText`, `Container`, `Box`, `Spacer`, `Markdown`, `visibleWidth`,
 *   `truncateToWidth`, `wrapTextWithAnsi`.
 * The same values answer a tool's imports of the agent's packages
 * (packages.ts). Absent, because they belong to the agent process a tool no
 * longer runs in: sessions and their storage (`SessionManager`, ...), the
 * model and auth registries, settings, the SDK and run modes (`main`,
 * `createAgentSession`, ...), keybindings, prompt templates, skills, slash
 * commands, editors and themes, the built-in tools, `getAgentDir`, `VERSION`.
 * Importing one of them by value fails to load, with a message listing what
 * is provided: use `import type` for types.
 */
import { createRequire } from "node:module";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { format } from "node:util";
import { ToolError } from "./errors.ts";
import { exec, type ExecOptions, type ExecResult } from "./exec.ts";
import type { HostLink } from "./hostlink.ts";
import { packageEntry } from "./packages.ts";
import { TUI_EXPORTS } from "./tui.ts";

export const LOG_RECORDS_PER_CALL = 1000;
export const LOG_CHARS_PER_CALL = 256 * 1024;
// The host keeps pending previews, so it bounds them too (runner/_host/host_api.py
// has the same numbers); refused here first, where the tool sees it.
export const PENDING_MAX_BYTES = 1 << 20;
export const PENDING_PER_WORKER = 16;

// ----------------------------------------------------------------- logger

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40 } as const;

function charCount(text: string): number {
  // Characters as the protocol counts them (code points), not UTF-16 units.
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) n--;
  }
  return n;
}

interface Budget {
  records: number;
  chars: number;
  dropped: number;
}

/** `api.logger`: records reach the host's log, bounded per call. */
class HostLogger {
  // Per call id; the null key holds records outside calls (factory,
  // onSession, render hooks), reset after each call ends.
  private budgets = new Map<string | null, Budget>();

  constructor(private link: HostLink) {}

  private send(level: number, args: unknown[]): void {
    const callId = this.link.currentCallId();
    let message: string;
    try {
      message = format(...args);
    } catch {
      message = String(args[0]);
    }
    let budget = this.budgets.get(callId);
    if (budget === undefined) {
      budget = { records: 0, chars: 0, dropped: 0 };
      this.budgets.set(callId, budget);
    }
    budget.records += 1;
    budget.chars += charCount(message);
    if (budget.records > LOG_RECORDS_PER_CALL || budget.chars > LOG_CHARS_PER_CALL) {
      budget.dropped += 1;
      return;
    }
    this.link.notify("log", { call_id: callId, level, logger: "xcsh.tool", message });
  }

  /** Report how many records the bound dropped for a call that ended, and forget it. */
  endCall(callId: string): void {
    for (const key of [callId, null]) {
      const budget = this.budgets.get(key);
      this.budgets.delete(key);
      if (budget && budget.dropped > 0) {
        const message =
          `${budget.dropped} log records dropped (a call may log ${LOG_RECORDS_PER_CALL} records ` +
          `or ${LOG_CHARS_PER_CALL} characters)`;
        this.link.notify("log", { call_id: key, level: 30, logger: "xcsh", message });
      }
    }
  }

  readonly logger = {
    debug: (...args: unknown[]): void => this.send(LEVELS.debug, args),
    info: (...args: unknown[]): void => this.send(LEVELS.info, args),
    log: (...args: unknown[]): void => this.send(LEVELS.info, args),
    warn: (...args: unknown[]): void => this.send(LEVELS.warn, args),
    error: (...args: unknown[]): void => this.send(LEVELS.error, args),
  };
}

// --------------------------------------------------------------------- ui

/**
 * A theme without styles: any method (`fg(color, text)`, `bold(text)`, ...)
 * returns its last string argument as it is; `theme.name` is "plain".
 */
export const plainTheme: Record<string, unknown> = new Proxy(
  {},
  {
    get(_target, prop) {
      if (typeof prop === "symbol" || prop === "then" || prop === "toJSON") return undefined;
      if (prop === "name") return "plain";
      return (...args: unknown[]): string => {
        for (let i = args.length - 1; i >= 0; i--) if (typeof args[i] === "string") return args[i] as string;
        return "";
      };
    },
  },
);

function makeUi(link: HostLink): Record<string, unknown> {
  const ask = async (method: string, args: unknown[], key?: string): Promise<unknown> =>
    link.request("ui", { call_id: link.currentCallId(), method, args, ...(key === undefined ? {} : { key }) });
  const tell = (method: string, args: unknown[]): void => {
    if (link.hasUI()) link.notify("ui", { call_id: link.currentCallId(), method, args });
  };
  const orUndefined = (value: unknown): unknown => (value === null ? undefined : value);
  return {
    async select(title: string, options: readonly string[]): Promise<string | undefined> {
      if (!link.hasUI()) return undefined;
      return orUndefined(await ask("select", [title, options ? [...options] : []])) as string | undefined;
    },
    async confirm(title: string, message: string): Promise<boolean> {
      if (!link.hasUI()) return false;
      const answer = await ask("confirm", [title, message ?? null]);
      return answer === null || answer === undefined ? false : (answer as boolean);
    },
    async input(title: string, placeholder?: string): Promise<string | undefined> {
      if (!link.hasUI()) return undefined;
      return orUndefined(await ask("input", [title, placeholder ?? null])) as string | undefined;
    },
    async editor(title: string, prefill?: string, _options?: { signal?: AbortSignal }): Promise<string | undefined> {
      if (!link.hasUI()) return undefined;
      return orUndefined(await ask("editor", [title, prefill ?? null])) as string | undefined;
    },
    getEditorText(): string | Promise<string> {
      if (!link.hasUI()) return "";
      return ask("get_editor_text", []).then((text) => (text === null || text === undefined ? "" : (text as string)));
    },
    notify(message: string, type?: "info" | "warning" | "error"): void {
      tell("notify", [message, type ?? "info"]);
    },
    setStatus(key: string, text: string | undefined): void {
      tell("set_status", [key, text ?? null]);
    },
    setEditorText(text: string): void {
      tell("set_editor_text", [text]);
    },
    /**
     * A form for the user (MCP elicitation): `schema` is a flat JSON Schema object.
     * Resolves to `{action: "accept" | "decline" | "cancel", content}`; "cancel" without a UI.
     * `options.key` names the question for an MCP 2026-07-28 client (an input request by that key).
     */
    async elicit(message: string, schema: Record<string, unknown>, options: { key?: string } = {}): Promise<unknown> {
      const key = inputKey("api.ui.elicit", options?.key);
      if (!link.hasUI()) return { action: "cancel", content: null };
      const form = schema ?? { type: "object", properties: {} };
      const answer = await ask("elicit", [message, form], key);
      return answer ?? { action: "cancel", content: null };
    },
    async custom(..._args: unknown[]): Promise<undefined> {
      return undefined;
    },
    get theme(): Record<string, unknown> {
      return plainTheme;
    },
  };
}

export interface SampleOptions {
  maxTokens?: number;
  systemPrompt?: string;
  temperature?: number;
  stopSequences?: readonly string[];
  modelPreferences?: Record<string, unknown>;
  includeContext?: "none" | "thisServer" | "allServers";
  metadata?: Record<string, unknown>;
  /** The name of this request for an MCP 2026-07-28 client (an input request by that key), as for `ui.elicit`. */
  key?: string;
}

const INPUT_KEY = /^[A-Za-z0-9_.-]{1,64}$/;

function inputKey(what: string, key: unknown): string | undefined {
  if (key === undefined || key === null) return undefined;
  if (typeof key !== "string" || !INPUT_KEY.test(key)) {
    throw new TypeError(`${what}: key must be 1 to 64 letters, digits, '_', '.' or '-', got ${JSON.stringify(key)}`);
  }
  return key;
}

/**
 * `api.sample`: a completion from the host's model (MCP `sampling/createMessage`),
 * as the Python worker's `api.sample`. `messages` is a string (one user
 * message) or MCP sampling messages, where a string content is a text block.
 * Resolves to `{role, content, model, stopReason}`, or undefined when the host
 * cannot sample or the client declined. Sent whether or not a UI is attached.
 */
function makeSample(link: HostLink) {
  return async (
    messages: string | readonly Record<string, unknown>[],
    options: SampleOptions = {},
  ): Promise<unknown> => {
    const listed = typeof messages === "string" ? [{ role: "user", content: messages }] : [...messages];
    const params: Record<string, unknown> = {
      messages: listed.map((m) => ({
        ...m,
        role: m.role ?? "user",
        content: typeof m.content === "string" ? { type: "text", text: m.content } : m.content,
      })),
      maxTokens: options?.maxTokens ?? 1000,
    };
    for (const key of [
      "systemPrompt",
      "temperature",
      "includeContext",
      "stopSequences",
      "modelPreferences",
      "metadata",
    ] as const) {
      const value = options?.[key];
      if (value !== undefined && value !== null) params[key] = Array.isArray(value) ? [...value] : value;
    }
    const key = inputKey("api.sample", options?.key);
    const request = { call_id: link.currentCallId(), method: "sample", args: [params], ...(key === undefined ? {} : { key }) };
    const answer = await link.request("ui", request);
    return answer === null ? undefined : answer;
  };
}

// ---------------------------------------------------------------- typebox

/** Loads `@sinclair/typebox` from its package folder, once; throws a how-to-fix Error without it. */
export function typeboxLoader(dir: string): () => Record<string, unknown> {
  let loaded: Record<string, unknown> | undefined;
  return () => {
    if (loaded !== undefined) return loaded;
    const manifest = dir ? join(dir, "package.json") : "";
    if (!dir || !existsSync(manifest)) {
      throw new Error(
        "TypeBox (@sinclair/typebox) was not found" +
          (dir ? ` in ${dir}` : "") +
          ": api.typebox and pi.Type need it. Install it with `xcsh-run install-bun` " +
          "(or `make bun` in a checkout of xcsh-run), or write the schema as a plain JSON Schema object.",
      );
    }
    const pkg = JSON.parse(readFileSync(manifest, "utf8")) as {
      main?: string;
      module?: string;
      exports?: { ".": { import?: { default?: string } } };
    };
    // The ESM build, the one `import "@sinclair/typebox"` gives a tool under
    // Bun. Bun's require() loads ESM synchronously, so makeApi stays sync.
    const entry = pkg.exports?.["."]?.import?.default ?? pkg.module ?? pkg.main ?? "index.js";
    const require = createRequire(import.meta.url);
    loaded = require(join(dir, entry)) as Record<string, unknown>;
    return loaded;
  };
}

/** Loads a schema library installed beside TypeBox (zod, arktype), once; throws a how-to-fix Error without it. */
export function libraryLoader(typeboxDir: string, name: string, field: string): () => Record<string, unknown> {
  let loaded: Record<string, unknown> | undefined;
  return () => {
    if (loaded !== undefined) return loaded;
    const modules = typeboxDir ? dirname(dirname(typeboxDir)) : "";
    let entry = "";
    try {
      entry = modules ? packageEntry(join(modules, name)) : "";
    } catch {
      entry = ""; // not installed: the Error below says how to install it
    }
    if (!entry) {
      throw new Error(
        `${name} was not found` +
          (modules ? ` in ${modules}` : "") +
          `: ${field} needs it. Install it with \`xcsh-run install-bun\` (or \`make bun\` in a checkout of xcsh-run).`,
      );
    }
    loaded = createRequire(import.meta.url)(entry) as Record<string, unknown>;
    return loaded;
  };
}

// ----------------------------------------------------------------- events

/** `pi.events`: an event bus shared by the tools of one worker (never across workers). */
export class EventBus {
  private handlers = new Map<string, Set<(data: unknown) => unknown>>();

  /** Call `handler(data)` on every `emit(name, data)`; returns the function that stops it. */
  on(name: string, handler: (data: unknown) => unknown): () => void {
    if (typeof handler !== "function") throw new TypeError("events.on(name, handler): handler must be a function");
    const set = this.handlers.get(name) ?? new Set();
    set.add(handler);
    this.handlers.set(name, set);
    return () => {
      set.delete(handler);
    };
  }

  /** Call the handlers of `name` in the order they were added; one that throws is logged and the rest still run. */
  emit(name: string, data?: unknown): void {
    for (const handler of [...(this.handlers.get(name) ?? [])]) {
      try {
        const out = handler(data);
        if (out instanceof Promise) out.catch((exc) => console.error(`events: a '${name}' handler failed:`, exc));
      } catch (exc) {
        console.error(`events: a '${name}' handler failed:`, exc);
      }
    }
  }
}

// --------------------------------------------------------------------- pi

interface Libraries {
  typebox: () => Record<string, unknown>;
  zod: () => Record<string, unknown>;
  arktype: () => Record<string, unknown>;
  events: EventBus;
}

function makePi(libs: Libraries, logger: unknown): Record<string, unknown> {
  const typebox = libs.typebox;
  return {
    ...TUI_EXPORTS,
    ToolError,
    events: libs.events,
    get zod(): unknown {
      return libs.zod();
    },
    get arktype(): unknown {
      return libs.arktype();
    },
    get Type(): unknown {
      return typebox().Type;
    },
    /** A string enum schema, `{type: "string", enum: values}` (TypeBox's Unsafe, so it composes with Type). */
    StringEnum(values: readonly string[], options: { description?: string; default?: string } = {}): unknown {
      if (!Array.isArray(values) || !values.every((v) => typeof v === "string")) {
        throw new TypeError('StringEnum: values must be an array of strings, e.g. StringEnum(["add", "remove"])');
      }
      const schema: Record<string, unknown> = { type: "string", enum: [...values] };
      if (options?.description !== undefined) schema.description = options.description;
      if (options?.default !== undefined) schema.default = options.default;
      let Type: { Unsafe?: (s: unknown) => unknown } | undefined;
      try {
        Type = typebox().Type as typeof Type;
      } catch {
        return schema; // plain JSON Schema is all the host needs
      }
      return Type?.Unsafe ? Type.Unsafe(schema) : schema;
    },
    logger,
  };
}

// -------------------------------------------------------- pending actions

export interface PendingAction {
  label: string;
  sourceToolName: string;
  details: unknown;
  apply: (reason: string) => unknown;
  reject?: (reason: string) => unknown;
}

/** The actions this worker's tools pushed and the host has not resolved yet, by id. */
export class PendingActions {
  private actions = new Map<string, PendingAction>();
  private next = 1;

  get size(): number {
    return this.actions.size;
  }

  /** Remove and return an action (undefined for an unknown id). */
  take(actionId: string): PendingAction | undefined {
    const action = this.actions.get(actionId);
    this.actions.delete(actionId);
    return action;
  }

  add(action: PendingAction): string {
    const id = `a${this.next++}`;
    this.actions.set(id, action);
    return id;
  }
}

function detailsJson(details: unknown): string {
  if (typeof details === "function" || typeof details === "symbol") {
    throw new TypeError(`pushPendingAction: 'details' must be JSON-serialisable: got a ${typeof details}`);
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(details ?? null);
  } catch (err) {
    throw new TypeError(`pushPendingAction: 'details' must be JSON-serialisable: ${(err as Error).message}`);
  }
  return text ?? "null";
}

function pushPendingAction(link: HostLink, pending: PendingActions, action: unknown): string {
  if (action === null || typeof action !== "object") {
    throw new TypeError("pushPendingAction: expected an object {label, apply(reason), reject?, details?, sourceToolName?}");
  }
  const a = action as Record<string, unknown>;
  const { label, apply, reject } = a;
  if (typeof label !== "string" || label === "") {
    throw new TypeError("pushPendingAction: 'label' must be a non-empty string");
  }
  if (typeof apply !== "function") {
    throw new TypeError("pushPendingAction: 'apply' must be a function: apply(reason) -> result");
  }
  if (reject !== undefined && reject !== null && typeof reject !== "function") {
    throw new TypeError("pushPendingAction: 'reject' must be a function or absent");
  }
  const source = a.sourceToolName ? String(a.sourceToolName) : "custom_tool";
  const details = a.details ?? null;
  const size = Buffer.byteLength(detailsJson(details), "utf8") + Buffer.byteLength(label, "utf8");
  if (size > PENDING_MAX_BYTES) {
    throw new RangeError(
      `pushPendingAction: the label and details are ${size} bytes of JSON, over the ` +
        `${PENDING_MAX_BYTES}-byte limit of a pending action; keep a preview small (a summary, a diff's ` +
        "first lines) and leave the data in the worker, with apply()",
    );
  }
  if (pending.size >= PENDING_PER_WORKER) {
    throw new RangeError(
      `pushPendingAction: this worker holds ${pending.size} pending actions already, ` +
        "the most it may; they are waiting for resolve (apply or discard them first)",
    );
  }
  const actionId = pending.add({
    label,
    sourceToolName: source,
    details,
    apply: apply as PendingAction["apply"],
    reject: typeof reject === "function" ? (reject as PendingAction["reject"]) : undefined,
  });
  const params: Record<string, unknown> = {
    call_id: link.currentCallId(),
    action_id: actionId,
    label,
    source_tool_name: source,
  };
  if (details !== null) params.details = details;
  link.notify("pending/push", params);
  return actionId;
}

// ------------------------------------------------------------------- api

export interface WorkerApi {
  /** The object given to the factory (the original's CustomToolAPI). */
  api: Record<string, unknown>;
  pending: PendingActions;
  /** After each call: sends the "N log records dropped" record if any. */
  endCall(callId: string): void;
}

export function makeApi(link: HostLink, opts: { typeboxDir: string }): WorkerApi {
  const log = new HostLogger(link);
  const typebox = typeboxLoader(opts.typeboxDir);
  const pending = new PendingActions();
  const ui = makeUi(link);
  const events = new EventBus();
  const zod = libraryLoader(opts.typeboxDir, "zod", "pi.zod");
  const arktype = libraryLoader(opts.typeboxDir, "arktype", "pi.arktype");
  const pi = makePi({ typebox, zod, arktype, events }, log.logger);
  const api: Record<string, unknown> = {
    cwd: link.cwd,
    exec(command: string, args: readonly string[] = [], options?: ExecOptions): Promise<ExecResult> {
      return exec(command, args, options, link.cwd);
    },
    ui,
    get hasUI(): boolean {
      return link.hasUI();
    },
    logger: log.logger,
    get typebox(): Record<string, unknown> {
      return typebox();
    },
    pi,
    events,
    get zod(): unknown {
      return zod();
    },
    get arktype(): unknown {
      return arktype();
    },
    pushPendingAction(action: unknown): string {
      return pushPendingAction(link, pending, action);
    },
    sample: makeSample(link),
    /**
     * The folders the host's client works in (MCP `roots/list`): `[{uri, name?}]`, or undefined
     * when the host has no MCP client that offers roots. `options.key` as for `ui.elicit`.
     */
    async roots(options: { key?: string } = {}): Promise<unknown> {
      const key = inputKey("api.roots", options?.key);
      const request = { call_id: link.currentCallId(), method: "roots", args: [], ...(key === undefined ? {} : { key }) };
      const answer = await link.request("ui", request);
      return answer === null ? undefined : answer;
    },
  };
  return { api, pending, endCall: (callId: string) => log.endCall(callId) };
}
