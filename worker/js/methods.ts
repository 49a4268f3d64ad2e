/**
 * The method table of docs/protocol.md as the worker sees it (worker/protocol/methods.py):
 * which requests and notifications the host may send, in which states, and the
 * shape of their params. A request that does not fit is refused without `data`
 * (-32601, -32600, -32602); a host notification whose params do not fit is a
 * protocol violation.
 */
import { isObject, typeName } from "./frames.ts";

export enum State {
  READY = 1,
  LOADED = 2,
  CLOSING = 3,
}

type Check = (value: unknown) => string | null; // null: fits; else the expected type's name

const str: Check = (v) => (typeof v === "string" ? null : "str");
const optStr: Check = (v) => (v === null || typeof v === "string" ? null : "str | null");
const bool: Check = (v) => (typeof v === "boolean" ? null : "bool");
const obj: Check = (v) => (isObject(v) ? null : "object");
const any: Check = () => null;
const oneOf =
  (...choices: string[]): Check =>
  (v) =>
    typeof v === "string" && choices.includes(v) ? null : choices.map((c) => `'${c}'`).join(" | ");

/** [field, check, required] per params type; unknown members are ignored, as msgspec does. */
type Shape = [string, Check, boolean][];

const SHAPES: Record<string, Shape> = {
  load: [["path", str, true], ["module", optStr, false], ["sys_path", optStr, false], ["factory", str, false]],
  call: [["call_id", str, true], ["tool", str, true], ["arguments", any, true], ["ctx", obj, false]],
  shutdown: [],
  session: [["event", obj, true], ["ctx", obj, false]],
  render: [
    ["tool", str, true],
    ["kind", oneOf("call", "result"), true],
    ["args", any, false],
    ["result", any, false],
    ["options", obj, false],
    ["theme", any, false],
  ],
  "pending/resolve": [["action_id", str, true], ["action", oneOf("apply", "discard"), true], ["reason", str, true]],
  "$/cancel": [["call_id", str, true], ["reason", str, true]],
  "ui/changed": [["has_ui", bool, true]],
};

/** Host requests the worker serves, with the states they are allowed in (initialize only before READY). */
export const REQUESTS: Record<string, State[]> = {
  initialize: [],
  load: [State.READY, State.LOADED],
  call: [State.READY, State.LOADED],
  shutdown: [State.READY, State.LOADED],
  session: [State.READY, State.LOADED],
  render: [State.READY, State.LOADED],
  "pending/resolve": [State.READY, State.LOADED],
};

/** Host notifications the worker acts on (every other one is ignored). */
export const NOTICES = new Set(["$/cancel", "ui/changed"]);

/** Null when `params` fit the method's params type, else msgspec-style words for why not. */
export function checkParams(method: string, params: unknown): string | null {
  const shape = SHAPES[method] ?? [];
  if (!isObject(params)) return `Expected \`object\`, got \`${typeName(params)}\``;
  for (const [field, check, required] of shape) {
    if (!Object.prototype.hasOwnProperty.call(params, field)) {
      if (required) return `Object missing required field \`${field}\``;
      continue;
    }
    const expected = check(params[field]);
    if (expected !== null) return `Expected \`${expected}\`, got \`${typeName(params[field])}\` - at \`$.${field}\``;
  }
  return null;
}

/** A method name as the refusals quote it (repr-like, at most 80 characters). */
export function quoted(name: string): string {
  const text = `'${name}'`;
  return text.length <= 80 ? text : `${text.slice(0, 77)}...`;
}
