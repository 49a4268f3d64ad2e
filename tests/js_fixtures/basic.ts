// Tools for tests/test_js_worker.py: one per behaviour of the worker core.
import type { CustomToolFactory } from "@f5-sales-demo/xcsh";
// The worker's own ToolError (the same module instance the worker checks against).
import { ToolError } from "../../worker/js/errors.ts";

class Refusal extends RangeError {}
const sessionEvents: string[] = [];
const object = { type: "object", properties: {} };

const factory: CustomToolFactory = (pi: any) => [
  {
    name: "echo",
    label: "Echo",
    description: "Echoes its arguments",
    parameters: { type: "object", properties: { text: { type: "string" } } },
    async execute(toolCallId: string, params: any, _onUpdate: any, ctx: any) {
      return {
        content: [{ type: "text", text: `echo ${params.text}`, extra: "dropped" }],
        details: {
          toolCallId,
          params,
          ctx: { model: ctx.model, idle: ctx.isIdle(), queued: ctx.hasQueuedMessages() },
          init: process.env.XCSH_WORKER_INIT ?? null,
          childInit: ["spawnSync", "spawn"].map((how) =>
            how === "spawnSync"
              ? Bun.spawnSync(["sh", "-c", "echo ${XCSH_WORKER_INIT:-unset}"]).stdout.toString().trim()
              : Bun.spawnSync({ cmd: ["sh", "-c", "echo ${XCSH_WORKER_INIT:-unset} $EXTRA"], env: { EXTRA: "x" } }).stdout.toString().trim(),
          ),
          sessionEvents,
          cwd: pi.cwd,
          hasUI: pi.hasUI,
        },
      };
    },
    onSession(event: any) {
      sessionEvents.push(event.reason);
    },
    renderCall(args: any, theme: any) {
      // With the real api.ts, a theme's styling methods work and return the text as it is.
      return typeof theme?.bold === "function" ? theme.bold(`echo(${args.text})`) : `echo(${args.text})`;
    },
    renderResult(result: any, options: any) {
      return result.isError ? 7 : `${result.content[0].text} expanded=${options.expanded}`;
    },
  },
  {
    name: "upd",
    description: "Sends two updates, then its result",
    parameters: object,
    requires: { programs: ["git"], paths: { read: ["/srv/data"] }, network: ["tcp:443"] },
    execute(_id: string, _params: any, onUpdate: any) {
      onUpdate({ content: [{ type: "text", text: "one" }], details: { n: 1 } });
      onUpdate({ content: [{ type: "text", text: "two" }] });
      let message = "";
      try {
        onUpdate({ details: {} });
      } catch (exc) {
        message = (exc as Error).message;
      }
      return { content: [{ type: "text", text: "done" }], details: { message } };
    },
  },
  {
    name: "bug",
    description: "A planted bug",
    parameters: object,
    execute(_id: string, params: any) {
      return params.missing.field; // TypeError
    },
    onSession() {
      throw new Error("hook broke");
    },
  },
  {
    name: "deliberate",
    description: "Refuses on purpose",
    parameters: object,
    expectedErrors: [Refusal],
    execute(_id: string, params: any) {
      if (params.kind === "expected") throw new Refusal("expected refusal");
      throw new ToolError("no such branch");
    },
  },
  {
    name: "exits",
    description: "Calls process.exit",
    parameters: object,
    execute() {
      process.exit(3);
    },
  },
  {
    name: "sleepy",
    description: "Waits until aborted, and ignores it",
    parameters: object,
    execute(_id: string, _params: any, onUpdate: any, _ctx: any, signal: AbortSignal) {
      onUpdate({ content: [{ type: "text", text: "waiting" }] });
      return new Promise(() => {
        signal.addEventListener("abort", () => onUpdate({ content: [{ type: "text", text: `late: ${signal.reason}` }] }));
      });
    },
  },
  {
    name: "busy",
    description: "Busy-loops on the main thread forever",
    parameters: object,
    execute(_id: string, _params: any, onUpdate: any) {
      onUpdate({ content: [{ type: "text", text: "looping" }] });
      for (;;) {}
    },
  },
  {
    name: "rejects",
    description: "Leaves a promise rejection unhandled",
    parameters: object,
    execute(_id: string, params: any) {
      const fail = async () => {
        throw new SyntaxError("floating");
      };
      if (params.later) {
        setTimeout(() => void fail(), 10);
        return "returned first";
      }
      void fail();
      return new Promise(() => {});
    },
  },
  {
    name: "aborts",
    description: "Asks the host to abort the operation, then throws in a timer",
    parameters: object,
    execute(_id: string, _params: any, _onUpdate: any, ctx: any) {
      ctx.abort("enough");
      setTimeout(() => {
        throw new EvalError("thrown in a timer");
      }, 5);
      return new Promise(() => {});
    },
  },
  {
    name: "reason",
    description: "Reports how its signal was aborted",
    parameters: object,
    execute(_id: string, params: any, onUpdate: any, _ctx: any, signal: AbortSignal) {
      signal.addEventListener("abort", () => {
        const r = signal.reason as DOMException;
        const seen = { aborted: signal.aborted, name: r?.name, message: r?.message, error: r instanceof Error };
        require("node:fs").writeFileSync(params.marker, JSON.stringify(seen));
      });
      onUpdate({ content: [{ type: "text", text: "waiting" }] });
      return new Promise(() => {});
    },
  },
  {
    name: "big",
    description: "Returns as much text as asked",
    parameters: object,
    execute(_id: string, params: any, onUpdate: any) {
      if (params.throw) throw new Error("e".repeat(params.size));
      if (params.update) {
        try {
          onUpdate("u".repeat(params.size));
        } catch (exc) {
          return `${(exc as Error).name}: ${(exc as Error).message}`;
        }
      }
      return "x".repeat(params.size);
    },
  },
  {
    name: "baddetails",
    description: "Details JSON cannot carry",
    parameters: object,
    execute() {
      return { content: [], details: { n: 10n } };
    },
  },
  {
    name: "badblock",
    description: "An image block with raw bytes",
    parameters: object,
    execute() {
      return { content: [{ type: "image", data: new Uint8Array([1, 2]), mimeType: "image/png" }] };
    },
  },
  null,
  { name: "noexec", description: "no execute", parameters: object },
  { name: "echo", description: "a second echo", parameters: object, execute() {} },
  { name: "bad name!", description: "x", parameters: object, execute() {} },
  { name: "arr", description: "x", parameters: { type: "array" }, execute() {} },
  { name: "port", description: "x", parameters: object, requires: { network: ["tcp:99999"] }, execute() {} },
];

export default factory;
