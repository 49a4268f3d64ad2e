/**
 * The lifeline (docs/protocol.md, section 1): only the host holds the write end of
 * fd_in, so its end (or garbage on it) means the host is gone, and the worker
 * takes its whole tree down: the boundary's cgroup.kill, then its own process
 * group, then itself. Shared by the main thread and the reader thread, which runs
 * it on its own because the main thread may be stuck in a tool's busy loop.
 */
import * as fs from "node:fs";

export const EXIT_HOST_GONE = 4;

export function say(line: string): void {
  try {
    fs.writeSync(2, `xcsh-run worker: ${line}\n`);
  } catch {
    // stderr closed: nothing left to tell
  }
}

/**
 * `exit` ends this process: the main thread passes the real `process.exit`; the
 * reader thread, whose `process.exit` would end only itself, passes nothing and
 * the process SIGKILLs itself (the status the host normally sees anyway).
 */
export function lifeline(killFd: number, leader: boolean, why: string | null, exit?: (code: number) => void): never {
  if (why) say(why);
  if (killFd >= 0) {
    try {
      fs.writeSync(killFd, "1");
    } catch {
      // no cgroup, or already killed: the group kill below still runs
    }
  }
  // Only as the leader of our own group (the host always starts workers so):
  // otherwise kill(0) would reach whoever started this process by hand.
  if (leader) {
    try {
      process.kill(0, "SIGKILL");
    } catch {
      // nothing to do: exiting below
    }
  }
  if (exit) exit(EXIT_HOST_GONE);
  process.kill(process.pid, "SIGKILL");
  throw new Error("unreachable");
}

/** Whether this process leads its own process group (read once, before any tool code). */
export function leadsGroup(): boolean {
  try {
    const stat = fs.readFileSync("/proc/self/stat", "latin1");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[2]) === process.pid;
  } catch {
    return true; // /proc hidden by the sandbox: the host always starts the worker with setsid
  }
}
