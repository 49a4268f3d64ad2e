/**
 * The agent's packages, as a tool imports them, resolved to what this worker
 * provides (a Bun runtime plugin, registered before the tool's module is imported).
 *
 * Rules:
 * 1. `@sinclair/typebox` (and its subpaths) is the bundled TypeBox, the one
 *    `pi.typebox` and `pi.Type` give, whatever the tool's folder holds, so that
 *    a schema built either way is the same kind of object.
 * 2. The agent's packages (STAND_INS) are virtual modules of stand-ins: the
 *    values tools use of them that mean something outside the agent. Their
 *    types are erased, so `import type` of anything costs nothing.
 * 3. A named import the stand-in lacks fails in Bun as "Export named 'X' not
 *    found in module 'P'"; `missingExportHint` turns it into a message naming
 *    what is provided (loader.ts adds it to the load error).
 * 4. Anything else resolves as Bun does, from the tool's own node_modules.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { TUI_EXPORTS } from "./tui.ts";

const AGENT = ["@mariozechner/pi-coding-agent", "@oh-my-pi/pi-coding-agent", "@f5-sales-demo/xcsh"];
const AI = ["@mariozechner/pi-ai", "@oh-my-pi/pi-ai"];
const TUI = ["@mariozechner/pi-tui", "@oh-my-pi/pi-tui"];
const UTILS = ["@oh-my-pi/pi-utils"];

/** The names each stand-in exports, by package; their values are read from `pi` only when a tool imports the package. */
const TUI_NAMES = Object.keys(TUI_EXPORTS);
export const STAND_INS: ReadonlyMap<string, readonly string[]> = new Map([
  ...AGENT.map((name) => [name, ["Type", "StringEnum", "ToolError", "logger", "events", ...TUI_NAMES]] as const),
  ...AI.map((name) => [name, ["Type", "StringEnum"]] as const),
  ...TUI.map((name) => [name, TUI_NAMES] as const),
  ...UTILS.map((name) => [name, ["logger"]] as const),
]);

function exportsOf(pi: Record<string, unknown>, names: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of names) {
    try {
      const value = pi[name];
      if (value !== undefined) out[name] = value;
    } catch {
      // TypeBox not installed: `Type` is simply not provided
    }
  }
  return out;
}

let zodModule: (() => Record<string, unknown>) | undefined;

/** A zod 4 schema as JSON Schema, with the bundled zod's `toJSONSchema` (it reads any zod 4 schema's `_zod` definition). */
export function zodToJsonSchema(schema: unknown): unknown {
  const zod = zodModule?.() as { toJSONSchema?: (s: unknown) => unknown } | undefined;
  if (typeof zod?.toJSONSchema !== "function") throw new Error("zod is not installed with xcsh-run: run `xcsh-run install-bun`");
  return zod.toJSONSchema(schema);
}

/** Register the stand-ins and the TypeBox alias (rules 1, 2); once per worker, before the tool's import. */
export function registerPackages(pi: Record<string, unknown>, typeboxDir: string): void {
  zodModule = () => pi.zod as Record<string, unknown>;
  Bun.plugin({
    name: "xcsh-run agent packages",
    setup(build) {
      for (const [name, names] of STAND_INS) {
        // Lazy: the callback runs on the first import, so a tool that imports none loads nothing more.
        build.module(name, () => {
          const exports = exportsOf(pi, names);
          return { exports: { ...exports, default: exports }, loader: "object" };
        });
      }
      // A runtime plugin's onResolve is not consulted for bare specifiers, so
      // TypeBox and each subpath its package.json exports are virtual modules too,
      // loaded on first import.
      for (const sub of typeboxEntries(typeboxDir)) {
        const spec = sub === "." ? "@sinclair/typebox" : `@sinclair/typebox/${sub.slice(2)}`;
        build.module(spec, () => {
          // The ESM build, the file pi.typebox loads for ".", so both give one module instance.
          const exports = createRequire(import.meta.url)(packageEntry(typeboxDir, sub));
          return { exports: { ...exports }, loader: "object" };
        });
      }
    },
  });
}

/** The file `import "<package>/<sub>"` loads under Bun: the ESM entry of package.json's exports, else main. */
export function packageEntry(dir: string, sub = "."): string {
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { main?: string; module?: string; exports?: any };
  const entry = pkg.exports?.[sub] ?? (sub === "." && typeof pkg.exports === "string" ? pkg.exports : undefined);
  const pick = (e: any): string | undefined =>
    typeof e === "string" ? e : e && typeof e === "object" ? (pick(e.bun) ?? pick(e.import) ?? pick(e.default)) : undefined;
  const file = pick(entry) ?? (sub === "." ? (pkg.module ?? pkg.main ?? "index.js") : undefined);
  if (!file) throw new Error(`${dir}/package.json exports no '${sub}'`);
  return join(dir, file);
}

/** The entry points TypeBox's package.json exports (".", "./value", ...), none without TypeBox. */
function typeboxEntries(typeboxDir: string): string[] {
  if (!typeboxDir) return [];
  try {
    const pkg = JSON.parse(readFileSync(join(typeboxDir, "package.json"), "utf8")) as { exports?: Record<string, unknown> };
    return Object.keys(pkg.exports ?? { ".": null }).filter((key) => key === "." || /^\.\/[\w-]+$/.test(key));
  } catch {
    return [];
  }
}

/** Rule 3: what to add to an import error that names a stand-in, or "". */
export function missingExportHint(message: string): string {
  const missing = /Export named '([^']+)' not found in module '([^']+)'/.exec(message);
  if (missing) {
    const [, name, pkg] = missing;
    const names = STAND_INS.get(pkg!);
    if (!names) return "";
    return (
      ` (${pkg} is provided by xcsh-run as a stand-in without '${name}': it has ${[...names].sort().join(", ")}; ` +
      "import types with `import type`, and install what else the tool needs beside it)"
    );
  }
  const subpath = /Cannot find (?:module|package) '((@mariozechner\/pi-[a-z-]+|@oh-my-pi\/[a-z-]+|@f5-sales-demo\/xcsh)\/[^']*)'/.exec(message);
  if (subpath && STAND_INS.has(subpath[2]!)) {
    return ` (xcsh-run provides ${subpath[2]} itself, not its subpath '${subpath[1]}': import the names from '${subpath[2]}')`;
  }
  const unknown = /Cannot find (?:module|package) '((@mariozechner|@oh-my-pi)\/[^'/]+)'/.exec(message);
  if (unknown) {
    return ` (xcsh-run provides ${[...STAND_INS.keys()].join(", ")}; '${unknown[1]}' is not among them: install it beside the tool)`;
  }
  return "";
}
