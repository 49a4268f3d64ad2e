/**
 * What the tool API (api.ts) needs from the worker's connection (main.ts):
 * the one seam between them, so either side can be tested with a fake of the other.
 */
export interface HostLink {
  readonly cwd: string;
  /** Follows `initialize.has_ui`, then every `ui/changed`. */
  hasUI(): boolean;
  /** The call running now, or null (the factory, onSession, render hooks, apply/reject). */
  currentCallId(): string | null;
  /** A worker -> host notification. */
  notify(method: "log" | "abort" | "pending/push" | "ui", params: Record<string, unknown>): void;
  /**
   * A worker -> host request; resolves with the host's result, rejects with
   * `Error("the host refused ui: <message>")` on an error response.
   */
  request(method: "ui", params: Record<string, unknown>): Promise<unknown>;
}
