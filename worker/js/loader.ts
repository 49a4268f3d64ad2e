/**
 * `load`: import one module the way the original loader does (`default ?? module`
 * must be a function; `await factory(api)` may give a tool, an array of tools or a
 * promise of either), then check every entry as worker/_runtime/tool_module.py `describe_tool`
 * checks a Python tool. A bad entry is an entry error; its siblings still load.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { ignoredWarning, makeExtension } from "./extension.ts";
import { Code, type ErrorObject, errorObject } from "./frames.ts";
import { missingExportHint, zodToJsonSchema } from "./packages.ts";
import { ContentError, ProcessExit, checkIcons, errorMessage, errorType, short, traceback } from "./results.ts";

export interface LoadedTool {
  tool: Record<string, any>;
  description: Record<string, unknown>;
  expected: unknown[];
}

export interface Loaded {
  tools: Map<string, LoadedTool>;
  result: { tools: Record<string, unknown>[]; entry_errors: { index: number; message: string }[] };
}

/** Where the tool's own files are: the file, or the folder of a package (for `raised_at`). */
export function toolRoot(modulePath: string): string {
  try {
    if (fs.statSync(modulePath).isDirectory()) return modulePath.replace(/\/+$/, "");
  } catch {
    // a missing path fails the import, with its own message
  }
  return modulePath;
}

export async function loadTools(modulePath: string, api: unknown): Promise<Loaded | ErrorObject> {
  let mod: Record<string, unknown>;
  try {
    mod = await import(modulePath);
  } catch (exc) {
    if (exc instanceof ProcessExit) {
      return errorObject(
        Code.LOAD_ERROR,
        `${modulePath}: the module called process.exit(${short(exc.exitCode)}) while being imported; a tool module must not exit at import time (export a factory instead of running a main())`,
        { traceback: traceback(exc) },
      );
    }
    return errorObject(
      Code.LOAD_ERROR,
      `${modulePath}: importing the module raised ${errorType(exc)}: ${errorMessage(exc)}` + position(exc) + importHint(exc),
      { traceback: traceback(exc) },
    );
  }
  const factory = mod.default ?? mod;
  if (typeof factory !== "function") {
    return errorObject(
      Code.LOAD_ERROR,
      `${modulePath}: Tool must export a default function (the module's default export is ${describe(mod.default)}); ` +
        "add `export default function factory(pi) { return { name, label, description, parameters, execute } }`",
    );
  }
  let value: unknown;
  const extension = makeExtension(api as Record<string, unknown>);
  try {
    value = await factory(extension.api);
  } catch (exc) {
    const what = exc instanceof ProcessExit ? `called process.exit(${short(exc.exitCode)})` : `raised ${errorType(exc)}: ${errorMessage(exc)}`;
    return errorObject(Code.LOAD_ERROR, `${modulePath}: factory(api) ${what}`, { traceback: traceback(exc) });
  }
  if (value == null && !extension.tools.length) {
    return errorObject(
      Code.LOAD_ERROR,
      `${modulePath}: the module's default export returned ${value === null ? "null" : "nothing"} and registered no tool; ` +
        "a tool module returns its tools (`return { name, description, parameters, execute }` or an array), " +
        "an extension registers them (`pi.registerTool({ name, description, parameters, execute })`)",
    );
  }
  const returned = value == null ? [] : Array.isArray(value) ? value : [value];
  const entries = [...returned, ...extension.tools];
  const ignored = extension.ignored();
  if (ignored.length) (api as { logger?: { warn?(m: string): void } }).logger?.warn?.(ignoredWarning(modulePath, ignored));
  const loaded: Loaded = { tools: new Map(), result: { tools: [], entry_errors: [] } };
  entries.forEach((entry, index) => {
    let tool: LoadedTool;
    try {
      tool = describeTool(entry);
    } catch (exc) {
      if (!(exc instanceof EntryError)) throw exc;
      loaded.result.entry_errors.push({ index, message: exc.message });
      return;
    }
    const name = tool.description.name as string;
    if (loaded.tools.has(name)) {
      loaded.result.entry_errors.push({ index, message: `tool name '${name}' is already defined by an earlier entry` });
      return;
    }
    loaded.tools.set(name, tool);
    loaded.result.tools.push(tool.description);
  });
  return loaded;
}

function describe(value: unknown): string {
  if (value === undefined) return "missing";
  if (value === null) return "null";
  return Array.isArray(value) ? "an array" : `a ${typeof value}`;
}

/** Where Bun's transpiler stopped (a BuildMessage has a position and no stack). */
function position(exc: unknown): string {
  const at = (exc as { position?: { file?: string; line?: number; column?: number; lineText?: string } } | null)?.position;
  if (!at || typeof at.line !== "number") return "";
  return ` at ${at.file}:${at.line}:${at.column}` + (at.lineText ? ` (${at.lineText.trim()})` : "");
}

function importHint(exc: unknown): string {
  const text = errorMessage(exc);
  const standIn = missingExportHint(text);
  if (standIn) return standIn;
  if (exc instanceof RangeError && /call stack/i.test(text)) {
    return " (the module may import itself or the agent's package by value: use `import type` for types)";
  }
  if (/Cannot find (module|package)/i.test(text)) {
    return " (install the package next to the tool, with its own package.json, or import only what Bun has built in; type-only imports need `import type`)";
  }
  return "";
}

class EntryError extends Error {}

const NAME = /^[\p{L}\p{N}_-]+$/u;
const HINTS = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];

/** One factory entry as a ToolDescription (defaults omitted, as on the wire), or EntryError saying what is wrong. */
export function describeTool(entry: unknown): LoadedTool {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
    throw new EntryError(`expected a tool object with string name, string description, parameters and an execute function, got ${describe(entry)}`);
  }
  const tool = entry as Record<string, any>;
  const name = tool.name;
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new EntryError(`name must be a non-empty string of letters, digits, '_' or '-', got ${short(name)}`);
  }
  const fail = (what: string): never => {
    throw new EntryError(`tool '${name}': ${what}`);
  };
  if (typeof tool.description !== "string") fail(`description must be a string, got ${describe(tool.description)}`);
  if (tool.label !== undefined && typeof tool.label !== "string") fail("label must be a string");
  if (typeof tool.execute !== "function") fail("execute must be a function (toolCallId, params, onUpdate, ctx, signal)");
  const concurrency = tool.concurrency ?? "shared";
  if (concurrency !== "shared" && concurrency !== "exclusive") fail(`concurrency must be 'shared' or 'exclusive', got ${short(concurrency)}`);
  const timeout = tool.timeout ?? null;
  if (timeout !== null && !(typeof timeout === "number" && timeout > 0 && Number.isFinite(timeout))) {
    fail(`timeout must be a positive number of seconds, got ${short(timeout)}`);
  }
  for (const hook of ["onSession", "renderCall", "renderResult"]) {
    if (tool[hook] != null && typeof tool[hook] !== "function") fail(`${hook} must be a function, got ${describe(tool[hook])}`);
  }
  const expected = tool.expectedErrors ?? [];
  if (!Array.isArray(expected) || expected.some((cls) => typeof cls !== "function")) {
    fail("expectedErrors must be an array of error classes (e.g. [RangeError, MyError])");
  }
  const description: Record<string, unknown> = {
    name,
    label: tool.label ?? name,
    description: tool.description,
    parameters: objectSchema(tool.parameters, name, "parameters"),
    params_kind: "json_schema",
  };
  if (tool.hidden) description.hidden = true;
  if (tool.deferrable) description.deferrable = true;
  if (tool.keepsProcesses) description.keeps_processes = true;
  const taskSupport = tool.taskSupport ?? "forbidden";
  if (!["forbidden", "optional", "required"].includes(taskSupport)) fail(`taskSupport must be "forbidden", "optional" or "required", got ${short(taskSupport)}`);
  if (taskSupport !== "forbidden") description.task_support = taskSupport;
  if (tool.taskAfterInput) {
    if (taskSupport === "forbidden") fail(`taskAfterInput needs taskSupport "optional" or "required"`);
    description.task_after_input = true;
  }
  if (concurrency !== "shared") description.concurrency = concurrency;
  if (timeout !== null) description.timeout = timeout;
  if (typeof tool.onSession === "function") description.has_on_session = true;
  if (typeof tool.renderCall === "function") description.has_render_call = true;
  if (typeof tool.renderResult === "function") description.has_render_result = true;
  const outputSchema = tool.outputSchema ?? tool.output_schema;
  if (outputSchema != null) description.output_schema = objectSchema(outputSchema, name, "outputSchema");
  if (tool.annotations != null) description.annotations = annotations(tool.annotations, name);
  if (tool.icons != null) {
    try {
      description.icons = checkIcons(tool.icons, "icons");
    } catch (exc) {
      if (exc instanceof ContentError) fail(exc.message);
      throw exc;
    }
  }
  if (tool.approval != null) {
    // An object with a policy (`{tier, policy: "prompt"}`) is decided in the worker, as a function is:
    // the host must not skip the question for a `read` tier that still asks.
    const object = typeof tool.approval === "object";
    const tier = typeof tool.approval === "function" || (object && tool.approval.policy != null) ? "dynamic" : object ? tool.approval.tier : tool.approval;
    if (!["read", "write", "exec", "dynamic"].includes(tier)) fail(`approval must be "read", "write", "exec" or a function of the arguments, got ${short(tool.approval)}`);
    description.approval = tier;
  }
  if (tool.formatApprovalDetails != null && typeof tool.formatApprovalDetails !== "function") fail("formatApprovalDetails must be a function (args) => string[]");
  const unused = UNUSED_FIELDS.filter((field) => tool[field] !== undefined);
  if (unused.length) description.ignored_fields = unused;
  if (tool.requires != null) {
    const needs = requires(tool.requires, name);
    if (Object.keys(needs).length) description.requires = needs;
  }
  return { tool, description, expected };
}

/** Fields public pi-mono / oh-my-pi tools set that mean nothing here: reported at load, never silently dropped. */
const UNUSED_FIELDS = ["strict", "loadMode", "mcpServerName", "mcpToolName"];

const NEEDS = ["programs", "read", "write", "network"];

/** What the tool needs under `strict` (shown to the user, never granted by itself), as worker/protocol/requires.py checks it. */
function requires(value: unknown, tool: string): Record<string, string[]> {
  const keys = "keys: programs, read, write, network, or paths.read and paths.write";
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new EntryError(`tool '${tool}': requires must be an object like {programs: ["git"]}, got ${describe(value)}`);
  }
  const data: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  const paths = data.paths;
  delete data.paths;
  if (paths != null) {
    if (typeof paths !== "object" || Array.isArray(paths)) throw new EntryError(`tool '${tool}': requires paths must be an object with read and write arrays`);
    for (const [key, entries] of Object.entries(paths)) {
      data[key] = Array.isArray(entries) ? [...((data[key] as unknown[]) ?? []), ...entries] : entries;
    }
  }
  const out: Record<string, string[]> = {};
  for (const [key, entries] of Object.entries(data)) {
    if (!NEEDS.includes(key)) throw new EntryError(`tool '${tool}': requires has an unknown key ${short(key)} (${keys})`);
    if (entries == null) continue;
    if (!Array.isArray(entries) || entries.some((e) => typeof e !== "string" || !e)) {
      throw new EntryError(`tool '${tool}': requires ${key} must be an array of non-empty strings, got ${short(entries)}`);
    }
    for (const entry of key === "network" ? entries : []) {
      const port = /^tcp:(\d{1,5})$/.exec(entry);
      if (!port || !(Number(port[1]) > 0 && Number(port[1]) < 65536)) {
        throw new EntryError(`tool '${tool}': requires network: ${short(entry)} is not 'tcp:PORT' with a port from 1 to 65535`);
      }
    }
    if (entries.length) out[key] = [...entries];
  }
  return out;
}

/**
 * `parameters` or `outputSchema` as plain JSON Schema describing an object. A
 * TypeBox schema is one already: its symbol keys are dropped by JSON, as the host
 * never needs them (it validates arguments against the JSON Schema itself).
 */
function objectSchema(value: unknown, tool: string, field: string): Record<string, unknown> {
  value = jsonSchemaOf(value, tool, field);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new EntryError(
      `tool '${tool}': ${field} must be a JSON Schema object (e.g. pi.typebox.Type.Object({...})), got ${describe(value)}`,
    );
  }
  let schema: Record<string, unknown>;
  try {
    schema = JSON.parse(JSON.stringify(value));
  } catch (exc) {
    throw new EntryError(`tool '${tool}': ${field} is not a JSON-serialisable schema: ${errorMessage(exc)}`);
  }
  if (field === "outputSchema" && schema.type !== "object") {
    throw new EntryError(
      `tool '${tool}': outputSchema must have "type": "object" at its root (the details a tool returns are served as MCP structuredContent, a JSON object), got type ${short(schema.type)}`,
    );
  }
  if ((schema.type ?? "object") !== "object") {
    throw new EntryError(`tool '${tool}': the ${field} schema must describe an object, got type ${short(schema.type)}`);
  }
  return schema;
}

/** A zod 4 schema (`toJSONSchema` of its own module) or an arktype Type (`.toJsonSchema()`) as JSON Schema; anything else as is. */
function jsonSchemaOf(value: unknown, tool: string, field: string): unknown {
  const v = value as { _zod?: unknown; toJsonSchema?: () => unknown } | null;
  try {
    if (typeof v === "function" && typeof (v as any).toJsonSchema === "function") return (v as any).toJsonSchema();
    if (v !== null && typeof v === "object" && v._zod !== undefined) {
      const schema = zodToJsonSchema(v) as Record<string, unknown>;
      delete schema.$schema;
      return schema;
    }
  } catch (exc) {
    throw new EntryError(`tool '${tool}': ${field} could not be converted to JSON Schema: ${errorMessage(exc)}`);
  }
  return value;
}

function annotations(value: unknown, tool: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new EntryError(`tool '${tool}': annotations must be an object like {readOnlyHint: true}, got ${describe(value)}`);
  }
  const out: Record<string, unknown> = {};
  for (const [key, hint] of Object.entries(value)) {
    if (key === "title") {
      if (hint != null && typeof hint !== "string") throw new EntryError(`tool '${tool}': annotations title must be a string, got ${short(hint)}`);
    } else if (HINTS.includes(key)) {
      if (hint != null && typeof hint !== "boolean") throw new EntryError(`tool '${tool}': annotations ${key} must be true or false, got ${short(hint)}`);
    } else {
      throw new EntryError(`tool '${tool}': annotations has an unknown key ${short(key)} (the keys are title, ${HINTS.join(", ")})`);
    }
    if (hint != null) out[key] = hint;
  }
  return out;
}

export const WORKER_DIR = path.dirname(new URL(import.meta.url).pathname);
