/**
 * `ctx.sessionManager`: a read-only view of the session's history, as the host sent it.
 *
 * 1. The host sends the view with every call and session event under the ctx key
 *    `$session` (`{sessionId, cwd, entries, truncated}`); it is taken out of the
 *    shared state, so the ctx's own keys never show it.
 * 2. Entries are the original's session entries, oldest first; a call's result is
 *    `{type: "message", message: {role: "toolResult", toolName, toolCallId, content,
 *    details, isError}}`. Only the newest entries within the host's caps are sent
 *    (`isTruncated()` says when older ones were left out).
 * 3. Read-only: getters return deep copies, so one hook cannot change what the next reads.
 * 4. `startNeeded` tells the worker when to run onSession({reason: "start"}) before a
 *    call: the first call it serves, and a call of another session than the previous
 *    one (a pooled worker may serve several in turn), so a tool rebuilding its state
 *    there holds the state of the session it is called for.
 */

export const WIRE_KEY = "$session";

type Entry = Record<string, any>;

function copy<T>(value: T): T {
  return value === undefined ? value : structuredClone(value);
}

export class SessionManager {
  readonly #view: Record<string, any>;

  constructor(view: unknown) {
    this.#view = typeof view === "object" && view !== null && !Array.isArray(view) ? (view as Record<string, any>) : {};
    Object.freeze(this);
  }

  #entries(): Entry[] {
    return Array.isArray(this.#view.entries) ? this.#view.entries : [];
  }

  getEntries(): Entry[] {
    return copy(this.#entries());
  }

  /** From the first entry to `fromId` (the leaf if absent), following `parentId`, oldest first. */
  getBranch(fromId?: string): Entry[] {
    const entries = this.#entries();
    const byId = new Map<unknown, Entry>();
    for (const e of entries) if (e && e.id != null) byId.set(e.id, e);
    if (byId.size === 0) return copy(entries);
    const path: Entry[] = [];
    const seen = new Set<unknown>();
    let current = byId.get(fromId ?? entries[entries.length - 1]?.id);
    while (current !== undefined && !seen.has(current.id)) {
      seen.add(current.id);
      path.push(current);
      current = byId.get(current.parentId);
    }
    return copy(path.reverse());
  }

  getEntry(id: string): Entry | undefined {
    return copy(this.#entries().find((e) => e?.id === id));
  }

  getLeafId(): string | null {
    const entries = this.#entries();
    return entries.length ? (entries[entries.length - 1]?.id ?? null) : null;
  }

  getLeafEntry(): Entry | undefined {
    const entries = this.#entries();
    return copy(entries[entries.length - 1]);
  }

  getSessionId(): string {
    return String(this.#view.sessionId ?? "default");
  }

  getCwd(): string {
    return String(this.#view.cwd ?? "");
  }

  /** undefined: xcsh-run keeps sessions in memory, never in a file. */
  getSessionFile(): string | undefined {
    return undefined;
  }

  isTruncated(): boolean {
    return this.#view.truncated === true;
  }
}

/** The shared state without the view, and the view as a SessionManager. */
export function splitState(state: Record<string, unknown>): [Record<string, unknown>, SessionManager] {
  if (!(WIRE_KEY in state)) return [state, new SessionManager(null)];
  const { [WIRE_KEY]: view, ...rest } = state;
  return [rest, new SessionManager(view)];
}

/** The session a call's ctx names, or null when the host sent no view. */
export function sessionOf(state: unknown): string | null {
  const view = (state as Record<string, any> | null)?.[WIRE_KEY];
  return typeof view === "object" && view !== null ? String(view.sessionId) : null;
}
