/**
 * The host API's host -> worker requests (docs/protocol.md, section 5): `session`
 * (every tool's onSession, in factory order), `render` (renderCall / renderResult,
 * which must give a string) and `pending/resolve` (a pending action's apply or reject).
 */
import { renderedText } from "./tui.ts";
import { type CallDeps, type Outcome, makeCtx } from "./calls.ts";
import { Code, errorObject } from "./frames.ts";
import type { LoadedTool } from "./loader.ts";
import { errorMessage, errorType, normalizeResult, traceback } from "./results.ts";

export async function handleSession(params: Record<string, any>, tools: Map<string, LoadedTool>, deps: CallDeps): Promise<Outcome> {
  const warnings: string[] = [];
  const ctx = makeCtx(params.ctx ?? {}, null, deps);
  for (const [name, loaded] of tools) {
    const hook = loaded.tool.onSession;
    if (typeof hook !== "function") continue;
    try {
      await hook.call(loaded.tool, params.event, ctx);
    } catch (exc) {
      // A broken hook is a warning, nothing more.
      warnings.push(`${name}.onSession('${params.event?.reason}') raised ${errorType(exc)}: ${errorMessage(exc)}`);
    }
  }
  return { result: { warnings } };
}

/**
 * The theme a render hook gets. The original passes a Theme object with styling
 * methods (`theme.fg(color, text)`, `theme.bold(text)`), which JSON cannot carry:
 * the host's theme data (if any) over the API's plain-text theme (`api.ui.theme`),
 * so such calls work and return the text unstyled.
 */
function themeFor(given: unknown, plain: unknown): unknown {
  if (plain == null || (typeof plain !== "object" && typeof plain !== "function")) return given;
  if (given == null) return plain;
  if (typeof given === "object" && !Array.isArray(given)) return Object.assign(Object.create(plain as object), given);
  return given;
}

export async function handleRender(params: Record<string, any>, tools: Map<string, LoadedTool>, plainTheme?: unknown): Promise<Outcome> {
  const loaded = tools.get(params.tool);
  if (params.kind === "approval") return approvalOf(loaded, params.args ?? {});
  const hookName = params.kind === "call" ? "renderCall" : "renderResult";
  const hook = loaded?.tool[hookName];
  if (typeof hook !== "function") {
    return { error: errorObject(Code.NOT_FOUND, `'${params.tool}' has no ${hookName} hook`) };
  }
  const args = params.args ?? {};
  const theme = themeFor(params.theme, plainTheme);
  let text: unknown;
  try {
    if (params.kind === "call") {
      // Two signatures are public: pi-mono's `renderCall(args, theme)` and the newer
      // `renderCall(args, options, theme)`; the hook's declared arity tells them apart.
      const options = { expanded: false, isPartial: false, ...(params.options ?? {}) };
      text = hook.length >= 3 ? await hook.call(loaded!.tool, args, options, theme) : await hook.call(loaded!.tool, args, theme);
    } else {
      // The original's shapes ({content, details, isError}; {expanded, isPartial, spinnerFrame}), with the wire's names too.
      const result = { ...(params.result ?? {}), isError: params.result?.is_error ?? false };
      const o = params.options ?? {};
      const options = { ...o, expanded: o.expanded ?? false, isPartial: o.is_partial ?? false, spinnerFrame: o.spinner_frame ?? undefined };
      text = await hook.call(loaded!.tool, result, options, theme, args);
    }
  } catch (exc) {
    return { error: errorObject(Code.TOOL_ERROR, `${hookName} raised ${errorType(exc)}: ${errorMessage(exc)}`) };
  }
  text = renderedText(text); // a TUI component (tui.ts) as its lines
  if (typeof text !== "string") {
    const got = text === null ? "null" : Array.isArray(text) ? "an array" : typeof text;
    return { error: errorObject(Code.TOOL_ERROR, `${hookName} returned ${got}, not a string`) };
  }
  return { result: { text } };
}

interface PendingAction {
  apply: (reason: string) => unknown;
  reject?: (reason: string) => unknown;
}

export async function handleResolve(params: Record<string, any>, pending: { take(actionId: string): PendingAction | undefined }): Promise<Outcome> {
  const action = pending.take(params.action_id);
  if (action === undefined) {
    return { error: errorObject(Code.NOT_FOUND, `no pending action '${params.action_id}' in this worker`) };
  }
  try {
    let value: unknown = null;
    if (params.action === "apply") value = await action.apply(params.reason);
    else if (typeof action.reject === "function") value = await action.reject(params.reason);
    const verb = params.action === "apply" ? "apply" : "reject";
    return { result: { result: value == null ? null : normalizeResult(value, `${verb}()'s result`) } };
  } catch (exc) {
    return { error: errorObject(Code.TOOL_ERROR, errorMessage(exc), { traceback: traceback(exc) }) };
  }
}

const TIERS = ["read", "write", "exec"];

/**
 * What a call of an `approval` tool asks (oh-my-pi's shapes): `approval` is a tier
 * ("read", "write", "exec") or a function of the arguments returning a tier or
 * `{tier, policy?, reason?}`; `formatApprovalDetails(args)` gives the lines shown
 * (a string or an array of strings). Sent as JSON text, as the render reply carries text.
 */
async function approvalOf(loaded: LoadedTool | undefined, args: unknown): Promise<Outcome> {
  const tool = loaded?.tool;
  if (tool == null) return { error: errorObject(Code.NOT_FOUND, "no such tool in this worker") };
  let tier: unknown = tool.approval;
  let reason: unknown;
  let policy: unknown;
  let lines: unknown = [];
  try {
    if (typeof tier === "function") tier = await tier.call(tool, args);
    if (tier != null && typeof tier === "object") ({ tier, reason, policy } = tier as Record<string, unknown>);
    if (typeof tool.formatApprovalDetails === "function") lines = await tool.formatApprovalDetails.call(tool, args);
  } catch (exc) {
    return { error: errorObject(Code.TOOL_ERROR, `approval raised ${errorType(exc)}: ${errorMessage(exc)}`) };
  }
  if (typeof tier !== "string" || !TIERS.includes(tier)) {
    return { error: errorObject(Code.TOOL_ERROR, `approval must give one of ${TIERS.join(", ")}, got ${typeof tier === "string" ? JSON.stringify(tier) : typeof tier}`) };
  }
  if (typeof lines === "string") lines = [lines];
  if (lines == null) lines = [];
  if (!Array.isArray(lines) || lines.some((l) => typeof l !== "string")) {
    return { error: errorObject(Code.TOOL_ERROR, "formatApprovalDetails must return a string or an array of strings") };
  }
  const decision = { tier, lines, reason: typeof reason === "string" ? reason : null, prompt: policy === "prompt" };
  return { result: { text: JSON.stringify(decision) } };
}
