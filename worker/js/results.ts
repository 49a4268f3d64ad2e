/**
 * Results: what a tool returns (or passes to onUpdate) as a CallResult, content
 * blocks checked as worker/_runtime/content.py checks them (MCP's shapes, unknown keys
 * dropped, messages naming the block, the field and the fix), and the evidence a
 * `tool_error` carries about the exception behind it (docs/protocol.md, section 6).
 */
import { ToolError } from "./errors.ts";

export interface CallResult {
  content: Record<string, unknown>[];
  details: unknown;
}

/** `execute` returned something that is not a result: a TypeError, so `xcsh-run fuzz` counts it as a bug. */
export class ResultError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = "ResultError";
  }
}

/** `process.exit()` called by tool code: thrown instead of exiting, so the worker answers and lives on. */
export class ProcessExit extends Error {
  constructor(readonly exitCode: unknown) {
    super(`process.exit(${short(exitCode)}) was called; a tool must not end the worker, throw an Error instead`);
    this.name = "ProcessExit";
  }
}

const SHAPES: Record<string, string> = {
  text: '{type: "text", text: string}',
  image: '{type: "image", data: base64 string, mimeType: "image/png"}',
  audio: '{type: "audio", data: base64 string, mimeType: "audio/wav"}',
  resource: '{type: "resource", resource: {uri, text} or {uri, blob: base64 string}}',
  resource_link: '{type: "resource_link", uri: string, name: string, title?, description?, mimeType?, size?}',
};
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const MIME = /^[A-Za-z0-9][\w.+-]*\/[A-Za-z0-9][\w.+-]*(\s*;.*)?$/;
const ICON_SIZE = /^([1-9][0-9]*x[1-9][0-9]*|any)$/;

export function short(value: unknown): string {
  let text: string;
  try {
    text = typeof value === "string" ? JSON.stringify(value) : typeof value === "bigint" ? `${value}n` : String(JSON.stringify(value) ?? String(value));
  } catch {
    text = Object.prototype.toString.call(value);
  }
  return text.length <= 80 ? text : `${text.slice(0, 77)}...`;
}

function plain(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !ArrayBuffer.isView(value);
}

function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return (value as object).constructor?.name ?? "object";
  return typeof value;
}

export class ContentError extends Error {}

function str(block: Record<string, unknown>, key: string, where: string, kind: string, nonempty = false): string {
  const value = block[key];
  if (typeof value === "string" && (value || !nonempty)) return value;
  if (value === undefined) throw new ContentError(`${where} is a "${kind}" block without "${key}": expected ${SHAPES[kind]}`);
  throw new ContentError(`${where}.${key} must be ${nonempty ? "a non-empty string" : "a string"}, got ${short(value)}`);
}

function base64(block: Record<string, unknown>, key: string, where: string, kind: string): string {
  const value = block[key];
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
    throw new ContentError(`${where}.${key} must be base64 text, got ${kindOf(value)}: use Buffer.from(raw).toString("base64")`);
  }
  const text = str(block, key, where, kind);
  if (!BASE64.test(text)) {
    throw new ContentError(`${where}.${key} is not valid base64: encode the raw bytes with Buffer.from(raw).toString("base64")`);
  }
  return text;
}

function mime(block: Record<string, unknown>, where: string, kind: string): string {
  if (!("mimeType" in block) && "mime_type" in block) throw new ContentError(`${where} has "mime_type": MCP spells it "mimeType"`);
  const value = str(block, "mimeType", where, kind);
  if (!MIME.test(value)) {
    const example = kind === "image" ? "image/png" : kind === "audio" ? "audio/wav" : "text/plain";
    throw new ContentError(`${where}.mimeType must be a MIME type such as "${example}", got ${short(value)}`);
  }
  return value;
}

function meta(value: unknown, where: string): Record<string, unknown> {
  if (!plain(value)) throw new ContentError(`${where}._meta must be an object, got ${short(value)}`);
  return { ...value };
}

/** One content block as MCP's JSON (known keys only), or ContentError naming `where` and the fix. */
export function checkBlock(block: unknown, where: string): Record<string, unknown> {
  if (!plain(block)) throw new ContentError(`${where} is not a content block: expected an object like ${SHAPES.text}, got ${short(block)}`);
  const kind = block.type;
  let out: Record<string, unknown>;
  if (kind === "text") {
    out = { type: "text", text: str(block, "text", where, kind) };
  } else if (kind === "image" || kind === "audio") {
    out = { type: kind, data: base64(block, "data", where, kind), mimeType: mime(block, where, kind) };
  } else if (kind === "resource") {
    out = { type: kind, resource: resource(block.resource, `${where}.resource`) };
  } else if (kind === "resource_link") {
    out = { type: kind, uri: str(block, "uri", where, kind, true), name: str(block, "name", where, kind, true) };
    for (const key of ["title", "description"]) if (block[key] != null) out[key] = str(block, key, where, kind);
    if (block.mimeType != null || "mime_type" in block) out.mimeType = mime(block, where, kind);
    if (block.size != null) {
      if (!Number.isInteger(block.size) || (block.size as number) < 0) {
        throw new ContentError(`${where}.size must be the resource's size in bytes (an integer >= 0), got ${short(block.size)}`);
      }
      out.size = block.size;
    }
    if (block.icons != null) out.icons = checkIcons(block.icons, `${where}.icons`);
  } else {
    throw new ContentError(
      `${where} is not a content block: its type ${short(kind)} is not one of "text", "image", "audio", "resource", "resource_link"`,
    );
  }
  if (block.annotations != null) out.annotations = annotations(block.annotations, `${where}.annotations`);
  if (block._meta != null) out._meta = meta(block._meta, where);
  return out;
}

function resource(value: unknown, where: string): Record<string, unknown> {
  if (!plain(value)) throw new ContentError(`${where} must be an object {uri, text} or {uri, blob}, got ${short(value)}`);
  const out: Record<string, unknown> = { uri: str(value, "uri", where, "resource", true) };
  if (value.mimeType != null || "mime_type" in value) out.mimeType = mime(value, where, "resource");
  const hasText = value.text != null;
  if (hasText === (value.blob != null)) {
    throw new ContentError(
      `${where} must have exactly one of "text" (a string) or "blob" (base64 of binary content), got ${hasText ? "both" : "neither"}`,
    );
  }
  if (hasText) out.text = str(value, "text", where, "resource");
  else out.blob = base64(value, "blob", where, "resource");
  if (value._meta != null) out._meta = meta(value._meta, where);
  return out;
}

function unknownKeys(value: Record<string, unknown>, known: string[], where: string): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) throw new ContentError(`${where} has an unknown key "${key}"; the keys are ${known.join(", ")}`);
  }
}

function annotations(value: unknown, where: string): Record<string, unknown> {
  if (!plain(value)) throw new ContentError(`${where} must be an object with audience, priority or lastModified, got ${short(value)}`);
  unknownKeys(value, ["audience", "priority", "lastModified"], where);
  const out: Record<string, unknown> = {};
  const { audience, priority, lastModified } = value;
  if (audience != null) {
    if (!Array.isArray(audience) || audience.some((r) => r !== "user" && r !== "assistant")) {
      throw new ContentError(`${where}.audience must be an array of "user" and/or "assistant", got ${short(audience)}`);
    }
    out.audience = [...audience];
  }
  if (priority != null) {
    if (typeof priority !== "number" || !(priority >= 0 && priority <= 1)) {
      throw new ContentError(`${where}.priority must be a number from 0 (optional) to 1 (required), got ${short(priority)}`);
    }
    out.priority = priority;
  }
  if (lastModified != null) {
    if (typeof lastModified !== "string" || Number.isNaN(Date.parse(lastModified))) {
      throw new ContentError(`${where}.lastModified must be an ISO 8601 timestamp such as "2025-01-12T15:00:58Z", got ${short(lastModified)}`);
    }
    out.lastModified = lastModified;
  }
  return out;
}

/** MCP icons: `[{src: https/http/data URI, mimeType?, sizes?: ["48x48" | "any"], theme?: "light" | "dark"}]`. */
export function checkIcons(value: unknown, where: string): Record<string, unknown>[] {
  if (!Array.isArray(value)) throw new ContentError(`${where} must be an array of icons like {src: "https://...", mimeType: "image/png"}`);
  return value.map((icon, index) => {
    const at = `${where}[${index}]`;
    if (!plain(icon)) throw new ContentError(`${at} must be an object like {src: "https://...", mimeType: "image/png"}`);
    unknownKeys(icon, ["src", "mimeType", "sizes", "theme"], at);
    const src = icon.src;
    if (typeof src !== "string" || !/^(https:\/\/|http:\/\/|data:)/.test(src)) {
      throw new ContentError(`${at}.src must be an https:// (or http://) URL or a data: URI, got ${short(src)}`);
    }
    const out: Record<string, unknown> = { src };
    if (icon.mimeType != null) {
      if (typeof icon.mimeType !== "string" || !MIME.test(icon.mimeType)) {
        throw new ContentError(`${at}.mimeType must be a MIME type such as "image/png", got ${short(icon.mimeType)}`);
      }
      out.mimeType = icon.mimeType;
    }
    if (icon.sizes != null) {
      if (!Array.isArray(icon.sizes) || !icon.sizes.every((s) => typeof s === "string" && ICON_SIZE.test(s))) {
        throw new ContentError(`${at}.sizes must be an array of "WxH" strings (like "48x48") or "any", got ${short(icon.sizes)}`);
      }
      out.sizes = [...icon.sizes];
    }
    if (icon.theme != null) {
      if (icon.theme !== "light" && icon.theme !== "dark") throw new ContentError(`${at}.theme must be "light" or "dark", got ${short(icon.theme)}`);
      out.theme = icon.theme;
    }
    return out;
  });
}

/** What `execute` (or `onUpdate`, `apply`) gave, as a CallResult; ResultError saying how to fix it otherwise. */
export function normalizeResult(value: unknown, what = "the result"): CallResult {
  if (typeof value === "string") return { content: [{ type: "text", text: value }], details: null };
  if (!plain(value)) {
    throw new ResultError(`${what} must be an object {content: [...], details?} or a string, got ${kindOf(value)}`);
  }
  if (!("content" in value)) throw new ResultError(`${what} has no "content" array: return {content: [...], details: ...} or a string`);
  const content = value.content;
  if (!Array.isArray(content)) throw new ResultError(`${what}'s "content" must be an array of content blocks, got ${kindOf(content)}`);
  let blocks: Record<string, unknown>[];
  try {
    blocks = content.map((block, i) => checkBlock(block, `${what}'s content[${i}]`));
  } catch (exc) {
    if (exc instanceof ContentError) throw new ResultError(exc.message);
    throw exc;
  }
  return { content: blocks, details: value.details === undefined ? null : value.details };
}

// --- error evidence ---------------------------------------------------------------

/** The constructor names up the prototype chain, most specific first, Object left out. */
export function prototypeNames(value: unknown): string[] {
  if (typeof value !== "object" || value === null) return [];
  const names: string[] = [];
  for (let proto = Object.getPrototypeOf(value); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    const name = proto.constructor?.name;
    if (typeof name === "string" && name) names.push(name);
  }
  return names.length ? names : ["Object"];
}

const FRAME = /\(?((?:file:\/\/)?\/[^()\s]*?):(\d+):\d+\)?\s*$/;

/** `<file>:<line>` of the innermost stack frame inside the tool module (else outside the worker), if any. */
export function raisedAt(stack: unknown, toolRoot: string | null, workerDir: string): string | null {
  if (typeof stack !== "string") return null;
  let fallback: string | null = null;
  for (const line of stack.split("\n").slice(1)) {
    const match = FRAME.exec(line.trim());
    if (!match) continue;
    const file = match[1].replace(/^file:\/\//, "");
    if (toolRoot && (file === toolRoot || file.startsWith(`${toolRoot}/`))) return `${file}:${match[2]}`;
    if (fallback === null && !file.startsWith(`${workerDir}/`)) fallback = `${file}:${match[2]}`;
  }
  return fallback;
}

export function errorMessage(exc: unknown): string {
  if (exc instanceof Error) return exc.message || exc.name || exc.constructor.name;
  if (typeof exc === "string") return exc;
  return short(exc);
}

export function errorType(exc: unknown): string {
  return typeof exc === "object" && exc !== null ? prototypeNames(exc)[0] : typeof exc;
}

export function traceback(exc: unknown): string | undefined {
  if (exc instanceof Error && typeof exc.stack === "string") return exc.stack;
  return undefined;
}

/**
 * `error.data`'s account of a thrown value: its type, every base, where it was
 * raised and whether it was deliberate (a ToolError, or an instance of a class
 * in the tool's `expectedErrors`). A thrown primitive carries no evidence.
 */
export function evidence(exc: unknown, expected: unknown[], toolRoot: string | null, workerDir: string): Record<string, unknown> {
  if (typeof exc !== "object" || exc === null) return {};
  const names = prototypeNames(exc);
  const deliberate = exc instanceof ToolError || expected.some((cls) => typeof cls === "function" && exc instanceof cls);
  return {
    exception: names[0],
    exception_mro: names,
    raised_at: raisedAt((exc as Error).stack, toolRoot, workerDir),
    deliberate: deliberate ? true : undefined,
  };
}

/** Which sandbox limit an uncaught error comes from, if any (as worker/_runtime/tool_call.py `_limit_hit`). */
export function limitHit(exc: unknown): string | null {
  if (exc instanceof RangeError && /out of memory/i.test(exc.message)) return "memory";
  const code = (exc as { code?: unknown } | null)?.code;
  if (code === "EFBIG") return "file_size";
  if (code === "EMFILE") return "open_files";
  return null;
}
