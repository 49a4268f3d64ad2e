/**
 * STUB of the tool API, so that the worker core runs on its own: the real api.ts
 * (cwd, exec, ui, hasUI, logger, typebox, pi, pushPendingAction) replaces this file.
 */
import { ToolError } from "./errors.ts";
import type { HostLink } from "./hostlink.ts";

export interface PendingActions {
  take(actionId: string): { apply: (reason: string) => unknown; reject?: (reason: string) => unknown } | undefined;
}

export interface WorkerApi {
  api: Record<string, unknown>;
  pending: PendingActions;
  endCall(callId: string): void;
}

export function makeApi(link: HostLink, _opts: { typeboxDir: string }): WorkerApi {
  const api = {
    cwd: link.cwd,
    get hasUI() {
      return link.hasUI();
    },
    pi: { ToolError },
  };
  return { api, pending: { take: () => undefined }, endCall() {} };
}
