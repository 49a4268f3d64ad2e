/**
 * PR_SET_DUMPABLE 0 for the Bun worker. The Python step made the worker
 * non-dumpable before it applied the sandbox, but execve resets the flag
 * (worker/_sandbox/contain.py): without this, another process of the same uid could
 * read this one's memory and environment through /proc or ptrace, or open
 * its protocol fds through /proc/<pid>/fd and forge frames to the host.
 * Between Bun's exec and this call no tool code has run: the window holds
 * only Bun's own start and the worker's imports.
 */
import { dlopen, FFIType } from "bun:ffi";

const PR_SET_DUMPABLE = 4;

/** Clears the dumpable flag; returns why it could not, or "" when it is done. */
export function setUndumpable(): string {
  try {
    // libc is already mapped into Bun: dlopen finds it by soname, opening no file (strict's Landlock allows none).
    const libc = dlopen("libc.so.6", {
      prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
    });
    try {
      const rc = libc.symbols.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
      return rc === 0 ? "" : `prctl(PR_SET_DUMPABLE, 0) returned ${rc}`;
    } finally {
      libc.close();
    }
  } catch (exc) {
    return `prctl(PR_SET_DUMPABLE, 0) through bun:ffi failed: ${exc instanceof Error ? exc.message : String(exc)}`;
  }
}
