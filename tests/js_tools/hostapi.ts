// Tools that use the host API from TypeScript (the twin of tests/tools/hostapi.py): UI, logger,
// ctx.abort, exec, session events, render hooks, pending actions.
import { appendFileSync } from "node:fs";

const EVENTS: Array<{ reason: string; model: unknown }> = [];
const MARKERS: string[] = [];

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

export default function factory(pi: any) {
  const OBJ = pi.typebox.Type.Object({}, { additionalProperties: true });
  const tool = (name: string, execute: (...args: any[]) => unknown, extra: Record<string, unknown> = {}) => ({
    name,
    description: name,
    parameters: OBJ,
    execute,
    ...extra,
  });
  const events = async () => ({ content: [], details: EVENTS });
  return [
    tool("ask", async (_id: string, params: any, onUpdate: any) => {
      onUpdate?.({ content: [{ type: "text", text: "asking" }], details: null });
      const confirm = await pi.ui.confirm("Proceed?", params.message ?? "really?");
      const select = await pi.ui.select("Pick", ["a", "b"]);
      pi.ui.notify("asked", "info");
      return { content: [{ type: "text", text: "answered" }], details: { confirm, select: select ?? null, has_ui: pi.hasUI } };
    }),
    tool("ask_input", async () => {
      const text = await pi.ui.input("Name", "placeholder");
      pi.ui.setStatus("k", "v");
      return { content: [], details: { input: text ?? null, has_ui: pi.hasUI } };
    }),
    tool("log", async (id: string, params: any) => {
      for (let i = 0; i < (params.count ?? 3); i++) pi.logger.warn(`record ${i} from ${id}`);
      return "logged";
    }),
    tool("abort", async (_id: string, params: any, _onUpdate: any, ctx: any, signal: AbortSignal) => {
      ctx.abort(params.reason ?? "enough");
      await sleep(60_000, signal);
      return "not aborted";
    }),
    tool("sleeper", async (_id: string, _params: any, onUpdate: any, _ctx: any, signal: AbortSignal) => {
      onUpdate?.({ content: [{ type: "text", text: "started" }], details: null });
      await sleep(60_000, signal);
      return "slept";
    }),
    tool("ctx_state", async (_id: string, _params: any, _onUpdate: any, ctx: any) => ({
      content: [],
      details: { model: ctx.model ?? null, idle: ctx.isIdle(), queued: ctx.hasQueuedMessages() },
    })),
    tool("exec_tree", async (_id: string, params: any) => {
      const script = "sleep 300 & sleep 300 & (setsid sleep 300 &) ; echo started; wait";
      const res = await pi.exec("sh", ["-c", script], { timeout: params.timeout ?? 500 });
      return { content: [], details: { stdout: res.stdout, code: res.code, killed: res.killed } };
    }),
    tool("exec_status", async (_id: string, params: any) => {
      const res = await pi.exec("sh", ["-c", params.script], params.input == null ? {} : { input: params.input });
      return { content: [], details: { stdout: res.stdout, stderr: res.stderr, code: res.code, killed: res.killed } };
    }),
    tool("exec_missing", async () => {
      await pi.exec("no-such-program-xyz", []);
      return "unreachable";
    }),
    tool("die", async () => {
      process.kill(process.pid, "SIGKILL");
    }),
    tool("events", events),
    tool("session_tool", events, {
      onSession(event: any, ctx: any) {
        EVENTS.push({ reason: event.reason, model: ctx.model ?? null });
        if (event.marker) MARKERS.push(event.marker); // from then on, every event is also written there
        for (const path of MARKERS) appendFileSync(path, `${event.reason}\n`);
      },
    }),
    tool("broken_session", events, {
      onSession() {
        throw new Error("on_session broke");
      },
    }),
    tool("rendered", async () => "plain", {
      label: "Rendered",
      renderCall: (args: unknown) => `<call ${JSON.stringify(args)}>`,
      renderResult: (result: any, options: any) => `<result ${result.content[0].text} partial=${options.isPartial}>`,
    }),
    tool("render_hangs", async () => "plain", {
      renderResult: () => {
        for (;;) {}
      },
    }),
    tool("render_garbage", async () => "plain", { label: "Garbage", renderCall: () => 42 }),
    tool(
      "propose",
      async (_id: string, params: any) => {
        pi.pushPendingAction({
          label: params.label,
          apply: (reason: string) => ({
            content: [{ type: "text", text: `applied ${params.label}: ${reason}` }],
            details: { pid: process.pid },
          }),
          reject: (_reason: string) => (params.reject_returns ? `rejected ${params.label}` : null),
          details: { diff: "+1 -1" },
          sourceToolName: "propose",
        });
        return { content: [{ type: "text", text: "preview ready" }], details: { pid: process.pid } };
      },
      { deferrable: true },
    ),
  ];
}
