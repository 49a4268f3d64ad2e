/**
 * The extension API: what a pi-mono style extension (`export default function (pi) {
 * pi.registerTool({...}); pi.on(...) }`) gets as `pi`.
 *
 * Rules:
 * 1. It is the tool API itself with the extension methods added, so a module that mixes
 *    both styles (returns tools and registers more) sees one object, and `pi.exec`,
 *    `pi.ui`, `pi.typebox` keep working.
 * 2. `registerTool` collects tools; they are the module's tools as if the factory had
 *    returned them, after any it did return. Their `execute` keeps the extension order
 *    `(toolCallId, params, signal, onUpdate, ctx)`: such a tool is marked (a WeakSet, so
 *    the author's object is not changed) and calls.ts passes the arguments in that order.
 * 3. Every other hook (`on`, `registerCommand`, `registerShortcut`, `sendMessage`, ...)
 *    is accepted and does nothing: xcsh-run runs tools, not an agent session, so these
 *    never fire. The load reports them once per module, named, so the author knows
 *    which parts of the extension do not run (a hook that threw instead would lose the
 *    tools the same extension registers).
 * 4. `pi.events` is the tool API's bus when it has one, else a small local bus: an
 *    extension's own `emit`/`on` pairs work within the worker.
 */

const EXTENSION_TOOLS = new WeakSet<object>();

/** True for a tool registered with `pi.registerTool`: its execute takes `(id, params, signal, onUpdate, ctx)`. */
export function isExtensionTool(tool: object): boolean {
  return EXTENSION_TOOLS.has(tool);
}

/** Hooks of the original ExtensionAPI that register something xcsh-run never runs. */
const HOOKS = [
  "registerCommand",
  "registerShortcut",
  "registerFlag",
  "registerMessageRenderer",
  "registerProvider",
  "unregisterProvider",
  "sendMessage",
  "sendUserMessage",
  "appendEntry",
  "setSessionName",
  "setLabel",
  "setActiveTools",
  "setModel",
  "setThinkingLevel",
  "setStatus",
  "setWidget",
  "setFooter",
  "setHeader",
] as const;

export interface Extension {
  /** The `pi` given to the module's default export. */
  api: Record<string, unknown>;
  /** Tools registered with `pi.registerTool`, in order. */
  tools: unknown[];
  /** What the module registered that does not run here, e.g. `on("session_start")`, `registerCommand("stats")`. */
  ignored(): string[];
}

export function makeExtension(api: Record<string, unknown>): Extension {
  // A frozen tool API cannot take the methods: then an object that inherits from it does.
  const base: Record<string, unknown> = Object.isExtensible(api) ? api : Object.create(api);
  const tools: unknown[] = [];
  const ignored = new Set<string>();
  const note = (what: string) => ignored.add(what);
  const name = (value: unknown) => (typeof value === "string" ? JSON.stringify(value) : "");
  const added: Record<string, unknown> = {
    registerTool(tool: unknown): void {
      if (typeof tool === "object" && tool !== null) EXTENSION_TOOLS.add(tool);
      tools.push(tool); // a bad entry is reported by the loader as an entry error, like a returned one
    },
    on(event: unknown, _handler?: unknown): void {
      note(`on(${name(event)})`);
    },
    getFlag: (): undefined => undefined,
    getSessionName: (): undefined => undefined,
    getActiveTools: (): string[] => tools.map((t) => (t as { name?: unknown })?.name).filter((n): n is string => typeof n === "string"),
    getAllTools: (): unknown[] => [],
    getCommands: (): unknown[] => [],
    getThinkingLevel: (): string => "off",
  };
  for (const hook of HOOKS) {
    added[hook] = (first?: unknown): undefined => {
      note(`${hook}(${name(first)})`);
      return undefined;
    };
  }
  // Rule 1: the tool API object itself, so its getters (hasUI, typebox) keep their receiver.
  for (const [key, value] of Object.entries(added)) {
    if (!(key in base)) Object.defineProperty(base, key, { value, enumerable: false, configurable: true });
  }
  if (!("events" in base)) Object.defineProperty(base, "events", { value: localBus(), enumerable: false, configurable: true });
  return { api: base, tools, ignored: () => [...ignored] };
}

/** The message the load logs once when the module registered hooks that do not run here. */
export function ignoredWarning(modulePath: string, ignored: string[]): string {
  return (
    `${modulePath}: this extension also registers ${ignored.join(", ")}; xcsh-run runs only the tools it ` +
    "registers (pi.registerTool): event handlers, commands, shortcuts, flags, renderers, providers and messages are accepted and never run"
  );
}

function localBus(): { on(channel: string, handler: (data: unknown) => void): () => void; emit(channel: string, data?: unknown): void } {
  const handlers = new Map<string, Set<(data: unknown) => void>>();
  return {
    on(channel, handler) {
      let set = handlers.get(channel);
      if (set === undefined) handlers.set(channel, (set = new Set()));
      set.add(handler);
      return () => set.delete(handler);
    },
    emit(channel, data) {
      for (const handler of [...(handlers.get(channel) ?? [])]) handler(data);
    },
  };
}
