/**
 * Runs one case of the Bun worker's tool API (worker/js/api.ts) against a fake
 * HostLink and prints its report as one JSON line: `bun harness.ts <case> [arg]`.
 * The typebox folder comes from XCSH_JSAPI_TYPEBOX.
 */
import { makeApi } from "../../worker/js/api.ts";
import { ToolError } from "../../worker/js/errors.ts";
import { execCases } from "./exec_cases.ts";
import { FakeLink } from "./fake_link.ts";

type Fn = (...args: unknown[]) => unknown;
const TYPEBOX = process.env.XCSH_JSAPI_TYPEBOX ?? "";

function caught(fn: () => unknown): Record<string, unknown> {
  try {
    return { returned: fn() ?? null };
  } catch (err) {
    return { name: (err as Error).name, message: (err as Error).message };
  }
}

const apiCases: Record<string, (arg: string) => Promise<unknown>> = {
  async ui_noop() {
    const link = new FakeLink();
    const { api } = makeApi(link, { typeboxDir: "" });
    const ui = api.ui as Record<string, Fn>;
    const editorText = ui.getEditorText!();
    const report = {
      hasUI: api.hasUI,
      select: (await ui.select!("t", ["a", "b"])) ?? "undefined",
      confirm: await ui.confirm!("t", "m"),
      input: (await ui.input!("t")) ?? "undefined",
      editor: (await ui.editor!("t", "pre")) ?? "undefined",
      editorTextIsString: typeof editorText === "string",
      editorText,
      notify: ui.notify!("m") ?? "undefined",
      setStatus: ui.setStatus!("k", "v") ?? "undefined",
      setEditorText: ui.setEditorText!("x") ?? "undefined",
      custom: (await ui.custom!(() => null)) ?? "undefined",
      elicit: await ui.elicit!("Where?", { type: "object", properties: {} }),
      themed: ((ui as unknown as { theme: Record<string, Fn> }).theme.fg!("accent", "text")),
      sent: [...link.sent],
    };
    // Sampling asks the host's MCP client, not a UI: it is sent without one too.
    link.answers = { sample: null };
    const sample = (await (api.sample as Fn)("Say hi", { maxTokens: 5, temperature: 0 })) ?? "undefined";
    return { ...report, sample, sampleSent: link.sent };
  },
  async ui_bridged() {
    const link = new FakeLink();
    link.ui = true;
    link.callId = "c1";
    link.answers = {
      select: "b",
      confirm: true,
      input: null,
      editor: "edited",
      get_editor_text: "draft",
      elicit: { action: "accept", content: { city: "Oslo" } },
      sample: { role: "assistant", content: { type: "text", text: "hi" }, model: "m", stopReason: "endTurn" },
    };
    const { api } = makeApi(link, { typeboxDir: "" });
    const ui = api.ui as Record<string, Fn>;
    const report: Record<string, unknown> = {
      hasUI: api.hasUI,
      select: await ui.select!("Pick", ["a", "b"]),
      confirm: await ui.confirm!("Sure?", "Delete it?"),
      input: (await ui.input!("Name")) ?? "undefined",
      editor: await ui.editor!("Body"),
      editorText: await ui.getEditorText!(),
      elicit: await ui.elicit!("Where?", { type: "object", properties: { city: { type: "string" } } }),
      sample: await (api.sample as Fn)([{ role: "user", content: "Say hi" }], {
        systemPrompt: "terse",
        stopSequences: ["\n"],
      }),
    };
    ui.notify!("hello");
    ui.notify!("bad", "error");
    ui.setStatus!("k", undefined);
    ui.setStatus!("k", "busy");
    ui.setEditorText!("new text");
    link.answers = { confirm: new Error("no terminal") };
    try {
      await ui.confirm!("a", "b");
      report.refused = "resolved";
    } catch (err) {
      report.refused = (err as Error).message;
    }
    link.ui = false; // a ui/changed: the getter follows the link
    report.hasUIAfter = api.hasUI;
    const count = link.sent.length;
    report.selectAfter = (await ui.select!("Pick", ["a"])) ?? "undefined";
    ui.notify!("dropped");
    report.sentAfterDetach = link.sent.length - count;
    report.sent = link.sent;
    return report;
  },
  async logger() {
    const link = new FakeLink();
    const { api, endCall } = makeApi(link, { typeboxDir: "" });
    const logger = api.logger as Record<string, Fn>;
    link.callId = "c1";
    logger.debug!("d");
    logger.info!("%s=%d", "a", 1);
    logger.warn!("w", { k: [1, 2] });
    logger.error!(new Error("boom").message);
    logger.log!("plain");
    for (let i = 0; i < 1000; i++) logger.info!(`n${i}`);
    const firstCall = link.sent.length;
    endCall("c1");
    const afterEnd = link.sent.slice(firstCall);
    // A new call has its own budget; one record over the character bound is dropped.
    link.callId = "c2";
    logger.info!("x".repeat(256 * 1024 + 1));
    logger.info!("small, after the budget is spent");
    const secondCall = link.sent.length - firstCall - afterEnd.length;
    endCall("c2");
    // Outside a call (the factory, onSession): call_id null.
    link.callId = null;
    logger.info!("outside");
    endCall("c3");
    return {
      first: link.sent.slice(0, 5),
      firstCall,
      afterEnd,
      secondCall,
      tail: link.sent.slice(-2),
    };
  },
  async pending() {
    const link = new FakeLink();
    link.callId = "c1";
    const { api, pending } = makeApi(link, { typeboxDir: "" });
    const push = api.pushPendingAction as Fn;
    const apply = (reason: string) => `applied: ${reason}`;
    const ids = [
      push({ label: "first", apply }),
      push({ label: "second", apply, reject: () => "no", details: { diff: "+1" }, sourceToolName: "editor" }),
    ];
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const errors = {
      notObject: caught(() => push(null)),
      noLabel: caught(() => push({ label: "", apply })),
      labelType: caught(() => push({ label: 3, apply })),
      noApply: caught(() => push({ label: "x" })),
      badReject: caught(() => push({ label: "x", apply, reject: "no" })),
      cyclic: caught(() => push({ label: "x", apply, details: cyclic })),
      bigint: caught(() => push({ label: "x", apply, details: { n: 1n } })),
      tooBig: caught(() => push({ label: "x", apply, details: "y".repeat(1 << 20) })),
    };
    const taken = pending.take(ids[1] as string)!;
    const afterTake = { size: pending.size, again: pending.take(ids[1] as string) ?? "undefined" };
    const filled: unknown[] = [];
    for (let i = 0; i < 20 && filled.length < 20; i++) {
      const r = caught(() => push({ label: `fill ${i}`, apply }));
      filled.push(r);
      if ("message" in r) break;
    }
    return {
      ids,
      sent: link.sent.slice(0, 2),
      errors,
      taken: {
        label: taken.label,
        sourceToolName: taken.sourceToolName,
        details: taken.details,
        apply: await taken.apply("ok"),
        reject: taken.reject ? await taken.reject("nope") : "none",
      },
      afterTake,
      filled,
      sentTotal: link.sent.length,
    };
  },
  async typebox() {
    const { api } = makeApi(new FakeLink(), { typeboxDir: TYPEBOX });
    const tb = api.typebox as { Type: Record<string, Fn>; Kind: symbol };
    const pi = api.pi as Record<string, unknown> & { Type: Record<string, Fn>; StringEnum: Fn };
    const schema = tb.Type.Object!({ a: tb.Type.String!(), n: tb.Type.Optional!(tb.Type.Integer!({ minimum: 0 })) });
    const kind = (schema as Record<symbol, unknown>)[tb.Kind];
    return {
      schema: JSON.parse(JSON.stringify(schema)),
      kind,
      same: api.typebox === api.typebox && pi.Type === tb.Type,
      enum: JSON.parse(JSON.stringify(pi.StringEnum(["add", "remove"], { description: "op", default: "add" }))),
      piKeys: Object.keys(pi).sort(),
      toolError: new (pi.ToolError as typeof ToolError)("nope") instanceof ToolError,
      loggerShared: pi.logger === api.logger,
    };
  },
  async typebox_missing(dir: string) {
    const report: Record<string, unknown> = {};
    for (const [key, typeboxDir] of [["empty", ""], ["absent", dir]] as const) {
      const link = new FakeLink();
      const { api } = makeApi(link, { typeboxDir });
      const pi = api.pi as Record<string, unknown> & { StringEnum: Fn };
      report[key] = {
        typebox: caught(() => api.typebox),
        piType: caught(() => pi.Type),
        enum: pi.StringEnum(["a"]),
        cwd: api.cwd,
        hasUI: api.hasUI,
      };
    }
    return report;
  },
};

const cases = { ...apiCases, ...execCases };
const [name, arg = ""] = process.argv.slice(2);
const run = name ? cases[name] : undefined;
if (!run) {
  console.error(`usage: bun harness.ts <case> [arg]; cases: ${Object.keys(cases).join(", ")}`);
  process.exit(2);
}
const report = await run(arg);
process.stdout.write(`${JSON.stringify(report, (_k, v) => (v === undefined ? "undefined" : v))}\n`);
