/**
 * A fake HostLink (the seam between the tool API and the worker's connection):
 * records what the API sends and answers `ui` requests from a script.
 */
import type { HostLink } from "../../worker/js/hostlink.ts";

export interface Sent {
  kind: "notify" | "request";
  method: string;
  params: Record<string, unknown>;
}

export class FakeLink implements HostLink {
  readonly sent: Sent[] = [];
  ui = false;
  callId: string | null = null;
  /** Answers for `ui` requests by params.method: a value, or an Error to refuse with. */
  answers: Record<string, unknown> = {};

  constructor(readonly cwd: string = process.cwd()) {}

  hasUI(): boolean {
    return this.ui;
  }

  currentCallId(): string | null {
    return this.callId;
  }

  notify(method: "log" | "abort" | "pending/push" | "ui", params: Record<string, unknown>): void {
    this.sent.push({ kind: "notify", method, params: structuredClone(params) });
  }

  request(method: "ui", params: Record<string, unknown>): Promise<unknown> {
    this.sent.push({ kind: "request", method, params: structuredClone(params) });
    const name = String(params.method);
    if (!(name in this.answers)) return Promise.reject(new Error(`fake link: no scripted answer for ui ${name}`));
    const answer = this.answers[name];
    if (answer instanceof Error) return Promise.reject(new Error(`the host refused ui: ${answer.message}`));
    // Answered on a later turn, as a real host's answer arrives.
    return new Promise((resolve) => setTimeout(() => resolve(answer), 0));
  }
}
