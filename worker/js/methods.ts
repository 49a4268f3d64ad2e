/**
 * The method table of docs/protocol.md as the worker sees it (worker/protocol/methods.py):
 * every request and notification of the protocol, the side that sends it, the
 * states it is allowed in and the state it moves the connection to, and the
 * shape of the params of those the host sends. A request that does not fit is
 * refused without `data` (-32601, -32600, -32602); a host notification whose
 * params do not fit is a protocol violation.
 *
 * Rules (tests/js/test_js_methods_table.py holds this file to methods.py):
 *
 * 1. Every Method and Notice of methods.py's WORKER_PROTOCOL is here, with the
 *    same name, sender, allowed states and transitions; nothing else is.
 * 2. SHAPES has the params fields of every method the host sends but
 *    `initialize` (the Python launch step, worker/_runtime/handoff.py, decodes
 *    it before Bun starts), each field required exactly when its Struct field
 *    has no default, and accepting the JSON values msgspec accepts for it. The
 *    worker's own params and results are not checked here: the host decodes
 *    them with methods.py's types.
 */
import { isObject, typeName } from "./frames.ts";

/** worker/protocol/methods.py `State`: transitions only ever move forward (ERROR aside). */
export enum State {
  AWAITING_INIT = 0,
  READY = 1,
  LOADED = 2,
  CLOSING = 3,
  CLOSED = 4,
  ERROR = 5,
}

/** Which end of the pipe sends a method (methods.py `Role`). */
export type Role = "host" | "worker";

/** A request: `onRequest` / `onResult` are the states it moves to when sent or received / when answered with a result. */
export interface Method {
  readonly name: string;
  readonly sender: Role;
  readonly allowed: readonly State[];
  readonly onRequest: State | null;
  readonly onResult: State | null;
}

/** A notification; `lenient`: params that do not fit drop it instead of failing the connection. */
export interface Notice {
  readonly name: string;
  readonly sender: Role;
  readonly allowed: readonly State[];
  readonly onReceive: State | null;
  readonly lenient: boolean;
}

/** Null: the value fits; else msgspec's words for why not (`Expected \`str\`, got \`int\``). */
type Check = (value: unknown) => string | null;

const expected = (type: string, value: unknown) => `Expected \`${type}\`, got \`${typeName(value)}\``;
const str: Check = (v) => (typeof v === "string" ? null : expected("str", v));
const optStr: Check = (v) => (v === null || typeof v === "string" ? null : expected("str | null", v));
const bool: Check = (v) => (typeof v === "boolean" ? null : expected("bool", v));
const obj: Check = (v) => (isObject(v) ? null : expected("object", v));
const any: Check = () => null;
/** A Literal of strings: msgspec decodes it as a str, then names the value that is not one of them. */
const oneOf =
  (...choices: string[]): Check =>
  (v) =>
    typeof v !== "string" ? expected("str", v) : choices.includes(v) ? null : `Invalid enum value ${pyRepr(v)}`;

/** [field, check, required] per params type; unknown members are ignored, as msgspec does. */
export type Shape = [string, Check, boolean][];

/** A table by name with no prototype: a method named `constructor` or `__proto__` is simply not in it. */
const byName = <T>(entries: Iterable<readonly [string, T]>): Readonly<Record<string, T>> =>
  Object.assign(Object.create(null), Object.fromEntries(entries));

export const SHAPES: Readonly<Record<string, Shape>> = byName(Object.entries({
  load: [["path", str, true], ["module", optStr, false], ["sys_path", optStr, false], ["factory", str, false]],
  call: [["call_id", str, true], ["tool", str, true], ["arguments", any, true], ["ctx", obj, false]],
  shutdown: [],
  session: [["event", obj, true], ["ctx", obj, false]],
  render: [
    ["tool", str, true],
    ["kind", oneOf("call", "result", "approval"), true],
    ["args", any, false],
    ["result", any, false],
    ["options", obj, false],
    ["theme", any, false],
  ],
  "pending/resolve": [["action_id", str, true], ["action", oneOf("apply", "discard"), true], ["reason", str, true]],
  "$/cancel": [["call_id", str, true], ["reason", str, true]],
  "ui/changed": [["has_ui", bool, true]],
} satisfies Record<string, Shape>));

const S = State;
// Permissive on purpose, as in methods.py: a `call` before `load` is answered
// not_found and a second `load` load_error by the worker itself; a tool may
// still log or prompt while a `shutdown` is on its way.
const SERVING = [S.READY, S.LOADED] as const;
const LIVE = [S.READY, S.LOADED, S.CLOSING] as const;

const method = (name: string, sender: Role, allowed: readonly State[], on: Partial<Pick<Method, "onRequest" | "onResult">> = {}): Method => ({
  name,
  sender,
  allowed,
  onRequest: on.onRequest ?? null,
  onResult: on.onResult ?? null,
});
const notice = (name: string, sender: Role, allowed: readonly State[]): Notice => ({ name, sender, allowed, onReceive: null, lenient: false });

/** Every request of the protocol, by name (methods.py `WORKER_PROTOCOL.requests`). */
export const REQUESTS: Readonly<Record<string, Method>> = byName(
  [
    method("initialize", "host", [S.AWAITING_INIT], { onResult: S.READY }),
    method("load", "host", SERVING, { onResult: S.LOADED }),
    method("call", "host", SERVING),
    method("shutdown", "host", SERVING, { onRequest: S.CLOSING }),
    method("session", "host", SERVING),
    method("render", "host", SERVING),
    method("pending/resolve", "host", SERVING),
    method("ui", "worker", LIVE),
  ].map((m) => [m.name, m] as const),
);

/** Every notification of the protocol, by name (methods.py `WORKER_PROTOCOL.notices`); `ui` is a request too. */
export const NOTICES: Readonly<Record<string, Notice>> = byName(
  [
    notice("update", "worker", LIVE),
    notice("$/cancel", "host", LIVE),
    notice("ui/changed", "host", LIVE),
    notice("ui", "worker", LIVE),
    notice("log", "worker", LIVE),
    notice("abort", "worker", LIVE),
    notice("pending/push", "worker", LIVE),
  ].map((n) => [n.name, n] as const),
);

/** Null when `params` fit the method's params type, else msgspec-style words for why not. */
export function checkParams(method: string, params: unknown): string | null {
  const shape = SHAPES[method] ?? [];
  if (!isObject(params)) return expected("object", params);
  for (const [field, check, required] of shape) {
    if (!Object.prototype.hasOwnProperty.call(params, field)) {
      if (required) return `Object missing required field \`${field}\``;
      continue;
    }
    const why = check(params[field]);
    if (why !== null) return `${why} - at \`$.${field}\``;
  }
  return null;
}

// What Python's str.isprintable() calls unprintable (a space aside): repr escapes it.
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
const ESCAPES: Record<string, string> = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** A string as Python's repr() writes it, which is how msgspec and the Python worker quote values. */
export function pyRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const char of text) {
    const code = char.codePointAt(0)!;
    if (Object.hasOwn(ESCAPES, char)) out += ESCAPES[char];
    else if (char === quote) out += `\\${quote}`;
    else if (char !== " " && UNPRINTABLE.test(char)) {
      const [prefix, width] = code < 0x100 ? ["x", 2] : code < 0x10000 ? ["u", 4] : ["U", 8];
      out += `\\${prefix}${code.toString(16).padStart(width, "0")}`;
    } else out += char;
  }
  return out + quote;
}

/** A method name as the refusals quote it (worker/protocol/connection.py `_short`: repr, at most 80 characters). */
export function quoted(name: string): string {
  const text = pyRepr(name);
  return text.length <= 80 ? text : `${text.slice(0, 77)}...`;
}
