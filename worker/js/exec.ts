/**
 * `api.exec`: run a program without a shell, killable as a whole tree (the
 * Python worker's `worker/_tool_api/exec.py`, with the original's options).
 *
 * - argv runs directly (no shell); the program is found on PATH when it has no slash.
 * - Each program starts in a new session (`detached: true` is setsid()), so a
 *   timeout or an abort can signal its whole process group: SIGTERM, then
 *   SIGKILL after KILL_GRACE_MS. Descendants that left the group (a setsid()
 *   grandchild) are found through /proc while their parent lives and are
 *   signalled one by one as well; whatever escapes both still dies with the
 *   worker's boundary when the host tears the worker down.
 * - `code`: the exit status; `-N` when signal N ended the program (as the
 *   Python worker; the original reported 0, which hid the signal). `killed` is
 *   true only when this call killed it (its timeout or its signal's abort):
 *   check it first. An already-aborted signal runs nothing and reports
 *   `{code: -15, killed: true}` (SIGTERM), as the Python worker does.
 * - The end of a call is the program's exit, not the end of its output: a
 *   grandchild that keeps stdout open (a daemon) does not make it hang; output
 *   is read for at most DRAIN_MS after the exit.
 * - `env` is the program's whole environment (default: the worker's), as in
 *   the Python worker and node's child_process: spread `process.env` to extend it.
 * - `cwd` defaults to `api.cwd`, the project, as in the original.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { constants as osConstants } from "node:os";
import { readdirSync, readFileSync, statSync } from "node:fs";

export const KILL_GRACE_MS = 1000;
export const DRAIN_MS = 500;

export interface ExecOptions {
  signal?: AbortSignal;
  cwd?: string;
  /** Milliseconds before the program is killed; none when absent or not > 0. */
  timeout?: number;
  /** The program's whole environment (default: the worker's). */
  env?: Record<string, string | undefined>;
  /** Written to the program's stdin, then closed; without it stdin is /dev/null. */
  input?: string | Uint8Array;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  /** Exit status; `-N` when signal N ended the program. */
  code: number;
  /** True only when exec killed it (timeout or abort). */
  killed: boolean;
}

const SIGTERM = osConstants.signals.SIGTERM;

function signalNumber(name: string | null): number {
  if (!name) return 0;
  const value = (osConstants.signals as Record<string, number>)[name];
  return typeof value === "number" ? value : 0;
}

// One process from /proc/<pid>/stat; starttime guards against a recycled pid.
interface ProcInfo {
  ppid: number;
  pgrp: number;
  session: number;
  start: string;
}

function readStat(pid: number): ProcInfo | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "latin1");
  } catch {
    return null;
  }
  // The command name may hold spaces and parentheses: fields start after the last ')'.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  // fields[0] is state (field 3); ppid is field 4, pgrp 5, session 6, starttime 22.
  if (fields[0] === "Z" || fields[0] === "X") return null;
  return { ppid: Number(fields[1]), pgrp: Number(fields[2]), session: Number(fields[3]), start: fields[19] ?? "" };
}

function allProcesses(): Map<number, ProcInfo> {
  const found = new Map<number, ProcInfo>();
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return found; // no /proc (a sandbox without it): the group signal still works
  }
  for (const name of names) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    const info = readStat(pid);
    if (info) found.set(pid, info);
  }
  return found;
}

/**
 * The program's tree: its descendants by parent link, and every process still
 * in its session or group (members whose parent died were reparented away, but
 * keep their session). Maps pid -> starttime.
 */
function treeOf(root: number, known: Map<number, string>): Map<number, string> {
  const procs = allProcesses();
  const tree = new Map<number, string>();
  for (const [pid, info] of procs) {
    if (pid === process.pid) continue;
    if (info.session === root || info.pgrp === root || (known.has(pid) && known.get(pid) === info.start)) {
      tree.set(pid, info.start);
    }
  }
  const rootInfo = procs.get(root);
  if (rootInfo) tree.set(root, rootInfo.start);
  // Parent links, to a fixed point: a setsid() grandchild is found through its live parent.
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, info] of procs) {
      if (!tree.has(pid) && tree.has(info.ppid) && pid !== process.pid) {
        tree.set(pid, info.start);
        grew = true;
      }
    }
  }
  return tree;
}

function signalTree(root: number, tree: Map<number, string>, sig: NodeJS.Signals): void {
  try {
    process.kill(-root, sig);
  } catch {
    // ESRCH: no member of the group is left; EPERM cannot happen for our own children.
  }
  for (const [pid, start] of tree) {
    // Re-read the starttime: a pid may have been recycled since the walk.
    const now = readStat(pid);
    if (now === null || now.start !== start) continue;
    try {
      process.kill(pid, sig);
    } catch {
      // gone meanwhile
    }
  }
}

// Programs whose exec() has not finished: SIGKILLed if the worker exits first,
// so that an exiting worker does not leave them to the boundary alone.
const live = new Set<number>();
let exitHookInstalled = false;

function trackLive(pid: number): void {
  live.add(pid);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", () => {
      for (const group of live) {
        try {
          process.kill(-group, "SIGKILL");
        } catch {
          // already gone
        }
      }
    });
  }
}

function describeSpawnError(command: string, cwd: string, err: NodeJS.ErrnoException): Error {
  const code = err.code ?? "";
  let text: string;
  if (code === "ENOENT") {
    let cwdMissing = false;
    try {
      cwdMissing = !statSync(cwd).isDirectory();
    } catch {
      cwdMissing = true;
    }
    text = cwdMissing
      ? `exec: cannot run ${JSON.stringify(command)}: its working directory ${JSON.stringify(cwd)} does not exist ` +
        "(pass an existing directory as options.cwd)"
      : `exec: cannot run ${JSON.stringify(command)}: no such program` +
        (command.includes("/") ? "" : " on PATH") +
        " (install it, or give its absolute path)";
  } else if (code === "EACCES" || code === "EPERM") {
    text =
      `exec: cannot run ${JSON.stringify(command)}: permission denied (${code}); ` +
      "it is not executable, or the sandbox does not allow running it: under --sandbox strict, allow it with " +
      `--allow-exec ${command} (policy field allow_exec); a tool declares this need with ` +
      `requires: { programs: [${JSON.stringify(command)}] }`;
  } else {
    text = `exec: cannot run ${JSON.stringify(command)}: ${err.message}`;
  }
  const out = new Error(text, { cause: err }) as NodeJS.ErrnoException;
  out.code = err.code;
  return out;
}

/** Run `command args...` and wait for it; a non-zero exit does not reject. Rejects if it cannot start. */
export function exec(
  command: string,
  args: readonly string[] = [],
  options: ExecOptions = {},
  defaultCwd: string = process.cwd(),
): Promise<ExecResult> {
  if (typeof command !== "string" || command === "") {
    return Promise.reject(new TypeError("exec: command must be a non-empty string, e.g. exec(\"git\", [\"status\"])"));
  }
  if (!Array.isArray(args) || !args.every((a) => typeof a === "string")) {
    return Promise.reject(new TypeError(`exec: args must be an array of strings (no shell), e.g. ["-1", "src"]`));
  }
  const opts = options ?? {};
  const signal = opts.signal;
  if (signal?.aborted) {
    return Promise.resolve({ stdout: "", stderr: "", code: -SIGTERM, killed: true });
  }
  const cwd = opts.cwd ?? defaultCwd;
  const input = opts.input;
  let data: Uint8Array | undefined;
  if (typeof input === "string") data = Buffer.from(input, "utf8");
  else if (input instanceof Uint8Array) data = input;
  else if (input !== undefined && input !== null) {
    return Promise.reject(new TypeError("exec: options.input must be a string or a Uint8Array"));
  }

  return new Promise<ExecResult>((resolve, reject) => {
    let child: ChildProcess;
    try {
      child = spawn(command, [...args], {
        cwd,
        env: opts.env ?? process.env,
        stdio: [data !== undefined ? "pipe" : "ignore", "pipe", "pipe"],
        detached: true, // setsid(): the program leads its own group and session
        windowsHide: true,
      });
    } catch (err) {
      reject(describeSpawnError(command, cwd, err as NodeJS.ErrnoException));
      return;
    }
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let killed = false;
    let exited = false;
    let settled = false;
    let exitCode = 0;
    let graceTimer: ReturnType<typeof setTimeout> | undefined;
    let timeoutTimer: ReturnType<typeof setTimeout> | undefined;
    let tree = new Map<number, string>();
    const pid = child.pid;
    if (pid !== undefined) trackLive(pid);

    const streamsEnded = [child.stdout, child.stderr].map(
      (stream) =>
        new Promise<void>((done) => {
          if (!stream) return done();
          stream.on("end", done);
          stream.on("close", done);
          stream.on("error", () => done());
        }),
    );
    child.stdout?.on("data", (chunk: Buffer) => out.push(chunk));
    child.stderr?.on("data", (chunk: Buffer) => err.push(chunk));

    const kill = (): void => {
      if (killed || exited || pid === undefined) return;
      killed = true;
      // The tree is taken before any signal: once the program dies its
      // descendants are reparented and only their session still names it.
      tree = treeOf(pid, tree);
      signalTree(pid, tree, "SIGTERM");
      graceTimer = setTimeout(() => {
        tree = treeOf(pid, tree);
        signalTree(pid, tree, "SIGKILL");
      }, KILL_GRACE_MS);
    };
    const onAbort = (): void => kill();
    signal?.addEventListener("abort", onAbort, { once: true });
    if (typeof opts.timeout === "number" && opts.timeout > 0) {
      timeoutTimer = setTimeout(kill, opts.timeout);
    }

    const cleanup = (): void => {
      signal?.removeEventListener("abort", onAbort);
      if (timeoutTimer !== undefined) clearTimeout(timeoutTimer);
      if (pid !== undefined) live.delete(pid);
    };

    child.on("error", (e: NodeJS.ErrnoException) => {
      if (settled) return;
      const syscall = String(e.syscall ?? "");
      if (pid !== undefined && !syscall.startsWith("spawn") && !syscall.startsWith("posix_spawn")) {
        return; // an error of a running child (a failed kill): its exit still comes
      }
      settled = true;
      cleanup();
      reject(describeSpawnError(command, cwd, e));
    });

    if (data !== undefined && child.stdin) {
      // EPIPE when the program exits without reading its input: not an error of exec.
      child.stdin.on("error", () => {});
      child.stdin.end(data);
    }

    child.on("exit", (code: number | null, sig: NodeJS.Signals | null) => {
      if (settled) return;
      exited = true;
      exitCode = sig ? -signalNumber(sig) : (code ?? 0);
      cleanup();
      if (killed && pid !== undefined) {
        // The leader is gone: sweep the rest of its group and tree at once, as
        // the Python worker does, instead of waiting for the grace period.
        if (graceTimer !== undefined) clearTimeout(graceTimer);
        tree = treeOf(pid, tree);
        signalTree(pid, tree, "SIGKILL");
      }
      let drainTimer: ReturnType<typeof setTimeout> | undefined;
      const drained = new Promise<void>((done) => {
        drainTimer = setTimeout(done, DRAIN_MS);
      });
      void Promise.race([Promise.all(streamsEnded), drained]).then(() => {
        if (drainTimer !== undefined) clearTimeout(drainTimer);
        // A grandchild may still hold the pipes open: stop reading them, so
        // neither this promise nor the worker's exit waits for it.
        child.stdout?.destroy();
        child.stderr?.destroy();
        child.stdin?.destroy();
        settled = true;
        resolve({
          stdout: Buffer.concat(out).toString("utf8"),
          stderr: Buffer.concat(err).toString("utf8"),
          code: exitCode,
          killed,
        });
      });
    });
  });
}
